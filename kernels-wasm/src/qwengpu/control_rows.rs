//! The sequencer's state as the stream holds it (see `control`): the record carried from token
//! to token, a warp's row (stack pointer and stack entries) and a CTA's row (warp statuses).

use super::isa::MachineSpec;
use super::net::Group;
use super::units::{channels, Builder, Padding};
use alloc::vec;
use alloc::vec::Vec;

/// Entries of a warp's stack.
pub const DEPTH: usize = 16;
pub const EXEC: usize = 0;
pub const CTRL: usize = 1;
pub const FETCH: usize = 2;
pub const DONE: usize = 3;
/// Terminator kinds.
pub const PLAIN: usize = 0;
pub const BRA: usize = 1;
pub const BAR: usize = 2;
pub const EXIT: usize = 3;
pub const LIVE: usize = 0;
pub const BARRIER: usize = 1;
pub const FINISHED: usize = 2;
pub const ABSENT: usize = 3;

/// The sizes the sequencer is built for.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub warps: usize,
    /// Warps per CTA at most.
    pub per_cta: usize,
    pub ctas: usize,
    pub lanes: usize,
    pub block_len: usize,
    /// pc values: blocks 0..rom_blocks and one past (a join at the program's end).
    pub pcs: usize,
}

impl Sizes {
    pub fn new(spec: &MachineSpec) -> Sizes {
        Sizes {
            warps: (spec.max_threads / spec.lanes).max(1),
            per_cta: (spec.max_block_threads / spec.lanes).max(1),
            ctas: (spec.max_threads / spec.lanes).max(1),
            lanes: spec.lanes,
            block_len: spec.block_len,
            pcs: spec.rom_blocks + 1,
        }
    }
    /// Join values: a block, or none (index `pcs`, the bottom entry's).
    pub fn joins(&self) -> usize {
        self.pcs + 1
    }
    pub fn masks(&self) -> usize {
        1 << self.lanes
    }
}

/// The sequencer's registers, carried from token to token.
#[derive(Debug, Clone)]
pub struct Record {
    pub kind: Group,
    pub warp: Group,
    /// The warp's index within its CTA.
    pub wi: Group,
    pub cta: Group,
    pub lane: Group,
    pub slot: Group,
    pub phase: Group,
    pub pc: Group,
    pub mask: Group,
    /// Lanes whose branch was taken so far.
    pub acc: Group,
    /// The block's terminator kind, branch target and join.
    pub term: Group,
    pub tgt: Group,
    pub join: Group,
}

impl Record {
    pub(super) fn new(b: &mut Builder, p: &str, z: &Sizes, cta: Option<Group>, phase: Option<Group>) -> Record {
        let mut g = |name: &str, len| b.s.group(&alloc::format!("{p}{name}"), len);
        let (kind, warp, wi) = (g("kind", 4), g("warp", z.warps), g("wi", z.per_cta));
        let cta = cta.unwrap_or_else(|| g("cta", z.ctas));
        let (lane, slot) = (g("lane", z.lanes), g("slot", z.block_len));
        let phase = phase.unwrap_or_else(|| g("phase", 2));
        let (pc, mask, acc) = (g("pc", z.pcs), g("mask", z.masks()), g("acc", z.masks()));
        let (term, tgt, join) = (g("term", 4), g("tgt", z.pcs), g("join", z.pcs));
        Record { kind, warp, wi, cta, lane, slot, phase, pc, mask, acc, term, tgt, join }
    }

    pub fn groups(&self) -> Vec<Group> {
        vec![
            self.kind, self.warp, self.wi, self.cta, self.lane, self.slot, self.phase, self.pc, self.mask, self.acc,
            self.term, self.tgt, self.join,
        ]
    }
}

/// A warp's row: stack pointer, entries (pc, join, mask), padding to 64 hot groups.
#[derive(Debug, Clone)]
pub struct WarpRow {
    pub sp: Group,
    pub entries: Vec<[Group; 3]>,
    pub pad: Padding,
}

pub const WARP_HOT: usize = 64;
pub const WARP_WIDTH: usize = 4096;

impl WarpRow {
    pub(super) fn new(b: &mut Builder, p: &str, z: &Sizes) -> WarpRow {
        let sp = b.s.group(&alloc::format!("{p}sp"), DEPTH + 1);
        let entries: Vec<[Group; 3]> = (0..DEPTH)
            .map(|d| {
                let mut g = |n: &str, len| b.s.group(&alloc::format!("{p}{d}.{n}"), len);
                [g("pc", z.pcs), g("join", z.joins()), g("mask", z.masks())]
            })
            .collect();
        let used: Vec<Group> = core::iter::once(sp).chain(entries.iter().flatten().copied()).collect();
        let pad = b.padding(p, &used, WARP_HOT, WARP_WIDTH);
        WarpRow { sp, entries, pad }
    }

    pub fn groups(&self) -> Vec<Group> {
        let mut v = vec![self.sp];
        v.extend(self.entries.iter().flatten());
        v.extend(self.pad.groups());
        v
    }

    pub fn channels(&self) -> Vec<usize> {
        channels(&self.groups())
    }
}

/// A CTA's row: each warp slot's status and whether a later CTA exists, padded to 16 hot.
#[derive(Debug, Clone)]
pub struct StatusRow {
    pub st: Vec<Group>,
    pub last: Group,
    pub pad: Padding,
}

pub const STATUS_HOT: usize = 16;
pub const STATUS_WIDTH: usize = 64;

impl StatusRow {
    pub(super) fn new(b: &mut Builder, p: &str, z: &Sizes) -> StatusRow {
        let st: Vec<Group> = (0..z.per_cta).map(|j| b.s.group(&alloc::format!("{p}st{j}"), 4)).collect();
        let last = b.s.group(&alloc::format!("{p}last"), 2);
        let used: Vec<Group> = st.iter().copied().chain([last]).collect();
        let pad = b.padding(p, &used, STATUS_HOT, STATUS_WIDTH);
        StatusRow { st, last, pad }
    }

    pub fn groups(&self) -> Vec<Group> {
        let mut v = self.st.clone();
        v.push(self.last);
        v.extend(self.pad.groups());
        v
    }

    pub fn channels(&self) -> Vec<usize> {
        channels(&self.groups())
    }
}
