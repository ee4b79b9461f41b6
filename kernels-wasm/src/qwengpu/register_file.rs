//! The second machine's program image and registers between tokens (issue #22,
//! `docs/qwengpu-second-machine.md` §7 and §8): the ROM and a live-out table that the prompt
//! writes into state rows, and the register rows where each VAL token's 16 bits land at the
//! place its slot in the step names, in Gated DeltaNet layers (`limb_memory`), with no host
//! copying anything. Three layers after the slot counter (`slot_counter`, which gives every VAL
//! token its slot and its step's record):
//!
//! 1. **Decode** (SwiGLU): the step's block and warp as one-hot groups, and two flags: *image*
//!    (a VAL token under a record whose lane mask is 0, which no executed step has) and *exec*
//!    (a VAL token under a record with lanes).
//! 2. **The program image** (Gated DeltaNet, a row per block and a head per slot and part),
//!    written by the prompt: an image record `(warp p, block b, mask 0)` names part `p` of block
//!    `b`, and the `j`-th VAL token after it writes head `j` of the part.
//!    - Part 0, **the live-out table**: which register, lane rank and half slot `j` of block `b`
//!      carries, `register | (2·rank + half) << 8`, stored with a third limb of 1 (the row is
//!      set). An exec VAL token reads its step's block from its slot's head. The order of the
//!      slots is the compiler's: lane rank (the active lanes in order), then the block's live-out
//!      registers in order, then the low half and the high half. So a step sends
//!      `2 · lanes · words` VAL tokens and the table does not depend on the mask.
//!    - Part 1, **the ROM**: the block's instructions as `program_image` words. Its head `k`
//!      holds word `k` of every block and reads it for the held block at every machine position
//!      of a step.
//!    - Part 2, **the launch** (block 0's row): the block's threads rounded up to whole warps,
//!      the grid's blocks, and each of the 8 parameters' two halves ([`LAUNCH_WORDS`]), read at
//!      every position of an executed step.
//! 3. **Address** (SwiGLU): the register as a one-hot group, and `(lane, half)` from the mask and
//!    the rank: one step unit per value of `c = 2·lanes·mask + 2·rank + half`, each sent to the
//!    lane the rank names in that mask (the rank-th set bit), or nowhere when the mask has fewer
//!    lanes. Beside them, the step's warp's first thread index and thread block, from the warp
//!    and the launch's block size (`thread_units`).
//! 4. **The register file** (Gated DeltaNet, rows `warp × (lane, half) × register`): an exec VAL
//!    token writes its two limbs at that address, gated by the table row's "set" limb. A read
//!    head returns a row for an address given in the stream (the operand fetch will give it).
//! 5. **Stores** (§13): after a lane's registers its global stores take three slots each (word
//!    index, low half, high half), named in the table by a register field above every register
//!    ([`STORE_FIELD`]), so they write no register row. The address layer flags a store's three
//!    slots; a latch (a one-row Gated DeltaNet before the executor's second stage) holds the
//!    index its first slot sent, and [`RegisterFile::store_units`] turn it into the memory groups
//!    at the two halves' slots, where the executor's load mixers write them as they write the
//!    prompt's memory tokens. Shared stores alike (§14), in the shared groups: the step's thread
//!    block one-hot (set at every position of an executed step), the word and the half.
//!
//! Every quantity a step unit reads is a small integer after the §2 norm, so each unit is exact
//! (`limbs`); both memories are `limb_memory`'s exact rows. At a record position nothing is
//! written (neither flag is set); at a text position every machine channel is 0, so no unit fires
//! and no key is set.

use super::carry::block_carry;
use super::deltanet::DeltaNetWeights;
use super::exec::load::SHARED_WORDS;
use super::interp::Launch;
use super::interp::{StepRecord, Stored};
use super::isa::{Inst, MachineSpec, Program, Space, MAX_PARAMS};
use super::limb_memory::{self, Digit::Fixed, Digit::Stream, Head, Layout};
use super::limbs::Layer;
use super::machine_tokens::Token;
use super::program_image::{block_words, ImageError, WORDS};
use alloc::vec;
use alloc::vec::Vec;

/// The machine's sizes as the register file sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub warps: usize,
    pub lanes: usize,
    pub regs: usize,
    pub blocks: usize,
    /// VAL slots a step may fill: per lane two for each live-out register and three for each
    /// store, so at most three per instruction (each writes one register or stores one word).
    pub slots: usize,
    /// Words of a block's ROM rows (`program_image`); they ride the first VAL slots.
    pub rom_words: usize,
    /// Threads a thread block holds.
    pub block_threads: usize,
}

impl Shape {
    pub fn of(spec: &MachineSpec) -> Shape {
        let lanes = spec.lanes;
        Shape {
            warps: spec.max_threads / lanes,
            lanes,
            regs: spec.regs,
            blocks: spec.rom_blocks,
            slots: 3 * lanes * spec.block_len,
            rom_words: spec.block_len * WORDS,
            block_threads: spec.max_block_threads,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageTooLarge {
    #[error("the program has {blocks} ROM blocks; the record tokens name {max}")]
    Blocks { blocks: usize, max: usize },
    #[error("block {block} sends {words} live-out words and {stores} stores a lane, {slots} VAL tokens a step; a step has {max} slots")]
    Slots { block: usize, words: usize, stores: usize, slots: usize, max: usize },
    #[error("block {block} is {words} ROM words; a block's ROM rows hold {max}")]
    Rom { block: usize, words: usize, max: usize },
    #[error("a launch of {grid} × {block} threads with {params} parameters: {why}")]
    Launch { grid: usize, block: usize, params: usize, why: &'static str },
    #[error("{words} words of global memory; the memory rows hold {max}")]
    Memory { words: usize, max: usize },
    #[error(transparent)]
    Encoding(#[from] ImageError),
}

/// Global memory's rows as address groups: 8 pages of 16 words (126 used), two halves each.
pub const MEMORY_GROUPS: [usize; 3] = [8, 16, 2];

/// A store slot's register field in the live-out table: `STORE_FIELD + 3·i + part` for the
/// global store of instruction `i` (part 0 its word index, 1 and 2 its word's low and high
/// half), `STORE_FIELD + 3·block_len + 3·i + part` for a shared one. Above every register, so no
/// register row is written at a store's slots.
pub const STORE_FIELD: usize = 16;

/// The stores of a block (an atomic's write is one): their instructions' places in it, and
/// whether each is shared.
pub fn store_slots(block: &[Inst]) -> Vec<(usize, bool)> {
    let stores = block.iter().enumerate().filter(|(_, i)| i.writes_memory());
    stores.map(|(k, i)| (k, i.memory_space() == Some(Space::Shared))).collect()
}

/// Shared memory's rows as address groups: the thread block (one-hot, a warp's at most), the
/// word, the half.
pub fn shared_groups(shape: &Shape) -> [usize; 3] {
    [shape.warps, SHARED_WORDS, 2]
}

/// The record that starts a program's prompt: the program image, the register rows, global and
/// shared memory's rows forget what an earlier launch left (the launch words are written whole
/// by every prompt).
pub const RESET: Token = Token::Record { warp: 4, block: 0, mask: 0 };

/// Words of the launch part: the block's threads (rounded up to whole warps), the grid's
/// blocks, then each parameter's low and high half.
pub const LAUNCH_WORDS: usize = 2 + 2 * MAX_PARAMS;

/// Where the register file reads and writes. Inputs: the token's kind and VAL limbs (its
/// embedding), the step's record (warp, block, mask) and the one-hot slots from the slot counter
/// (slot 0 is the record, VAL slots from 1). Its own channels start at `first` ([`Self::len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegisterFile {
    pub shape: Shape,
    pub d_model: usize,
    pub one: usize,
    pub kind: usize,
    pub val: [usize; 2],
    pub record: usize,
    pub slot: usize,
    pub first: usize,
}

impl RegisterFile {
    /// One-hot block, then one-hot warp.
    pub(super) fn block(&self) -> usize {
        self.first
    }
    pub(super) fn warp(&self) -> usize {
        self.block() + self.shape.blocks
    }
    /// The image flag (a VAL token of the program image), then the exec flag.
    fn image_flag(&self) -> usize {
        self.warp() + self.shape.warps
    }
    pub(super) fn exec_flag(&self) -> usize {
        self.image_flag() + 1
    }
    /// The table row read: register, `2·rank + half`, set.
    fn entry(&self) -> usize {
        self.exec_flag() + 1
    }
    /// The held block's ROM words: per word its two limbs and the set limb.
    pub fn rom(&self) -> usize {
        self.entry() + 3
    }
    /// One-hot register, then one-hot `(lane, half)`.
    fn reg(&self) -> usize {
        self.rom() + 3 * self.shape.rom_words
    }
    pub(super) fn lane_half(&self) -> usize {
        self.reg() + self.shape.regs
    }

    /// The read head's address: one-hot warp, `(lane, half)`, register, and a flag that must be
    /// 1 for the read to hit.
    pub fn probe(&self) -> [usize; 4] {
        let warp = self.lane_half() + 2 * self.shape.lanes;
        let lane_half = warp + self.shape.warps;
        let reg = lane_half + 2 * self.shape.lanes;
        [warp, lane_half, reg, reg + self.shape.regs]
    }

    /// Where the read head puts the row's two limbs.
    pub fn read(&self) -> usize {
        self.probe()[3] + 1
    }

    /// The run flag: a record or VAL token of an executed step (its mask has lanes).
    pub(super) fn run_flag(&self) -> usize {
        self.read() + 2
    }
    /// The table row of the next slot: register, `2·rank + half`, set.
    pub(super) fn next_entry(&self) -> usize {
        self.run_flag() + 1
    }
    /// The next slot's lane as a one-hot `(lane, half)` group per half.
    pub(super) fn next_lane(&self, half: usize) -> usize {
        self.next_entry() + 3 + 2 * self.shape.lanes * half
    }
    /// The next slot's lane's registers, four limbs each (two halves of two limbs).
    pub fn local(&self) -> usize {
        self.next_lane(2)
    }

    /// The launch words (§11: the block's size, the grid's, the parameters' halves), three
    /// channels each like the ROM's.
    pub fn launch(&self) -> usize {
        self.local() + 4 * self.shape.regs
    }
    /// The step's warp's first thread index in its thread block, then its thread block.
    pub fn thread(&self) -> usize {
        self.launch() + 3 * LAUNCH_WORDS
    }

    /// Where a memory token of the prompt writes (§12): one-hot page, word in the page and
    /// half ([`MEMORY_GROUPS`]).
    pub fn memory(&self) -> usize {
        self.thread() + 2
    }

    /// Five flags: the current slot is a store's word index, a global store's low half, its high
    /// half, a shared store's low half, its high half.
    pub fn store_part(&self) -> usize {
        self.memory() + MEMORY_GROUPS.iter().sum::<usize>()
    }
    /// The last word index a store's slot sent (its two limbs), held by [`Self::store_latch`].
    fn latched(&self) -> usize {
        self.store_part() + 5
    }
    /// Shared memory's address groups ([`shared_groups`]): the step's thread block one-hot at
    /// every position of an executed step, word and half at a shared store's halves.
    pub fn shared(&self) -> usize {
        self.latched() + 2
    }

    /// The reset flag: 1 at a reset record ([`RESET`]), where the image, the register rows
    /// and the shared rows forget everything (`limb_memory::cleared_at`).
    pub fn reset(&self) -> usize {
        self.shared() + shared_groups(&self.shape).iter().sum::<usize>()
    }

    /// The channels from `first` on that this uses.
    pub fn len(&self) -> usize {
        self.reset() + 1 - self.first
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// A channel relative to the bias, as `limbs::Layer` builds (channel 0 is the constant 1).
    fn at(&self, c: usize) -> usize {
        c - self.one
    }

    /// Layer 1: the step's block and warp one-hot, and the image and exec flags.
    pub fn decode(&self) -> Layer {
        let s = self.shape;
        let mut l = Layer::default();
        let [warp, block, mask] = [0, 1, 2].map(|i| self.at(self.record + i));
        l.one_hot(&[(block, 1.0)], &(0..s.blocks).map(|b| Some(self.at(self.block() + b))).collect::<Vec<_>>());
        l.one_hot(&[(warp, 1.0)], &(0..s.warps).map(|w| Some(self.at(self.warp() + w))).collect::<Vec<_>>());
        let kind = self.at(self.kind);
        // Image: [−kind − mask ≥ 0], a VAL token (kind 0) under a mask of 0. Exec:
        // [mask − 2^lanes·kind ≥ 1], a VAL token under a mask with lanes.
        l.step(&[(kind, -1.0), (mask, -1.0)], 0.0, &[(self.at(self.image_flag()), 1.0)]);
        l.step(&[(mask, 1.0), (kind, -((1 << s.lanes) as f32))], 1.0, &[(self.at(self.exec_flag()), 1.0)]);
        l.step(&[(mask, 1.0)], 1.0, &[(self.at(self.run_flag()), 1.0)]);
        // Reset: `v = warp + 64·mask − 64·kind` is −60 for the record `(warp 4, mask 0)` alone
        // (a VAL token has kind 0 and `v ≥ 0`; records' warps are below 64), so
        // `[v ≥ −60] − [v ≥ −59]`.
        let v = [(warp, 1.0), (mask, 64.0), (kind, -64.0)];
        let reset = self.at(self.reset());
        l.step(&v, -60.0, &[(reset, 1.0)]);
        l.step(&v, -59.0, &[(reset, -1.0)]);
        l.shifted(self.one)
    }

    /// The program image's layout: a row per block, a head per slot and part. Table head `j`
    /// holds slot `j` of each block's live-out table: written at the `j`-th VAL token after a
    /// table record (warp 0), read at an exec token in slot `j` (every table head adds into the
    /// same channels, and only the slot's reads anything). ROM head `k` holds word `k` of each
    /// block: written at the `k`-th VAL token after a ROM record (warp 1), read for the held
    /// block at every machine position.
    pub fn image_layout(&self) -> Layout {
        let s = self.shape;
        let (block, flag) = (self.block(), self.image_flag());
        // Part 0 is read twice: at its slot (`now`) and at the slot before (the next entry).
        let head = |part: usize, j: usize, now: bool| {
            let slot = self.slot + 1 + j;
            let mut h = Head::new(&[block], &[flag, self.warp() + part, slot], vec![Stream(block)], self.entry());
            match (part, now) {
                (0, true) => h.read_when = vec![self.exec_flag(), slot],
                (0, false) => (h.read_when, h.out) = (vec![self.run_flag(), slot - 1], self.next_entry()),
                (1, _) => h.out = self.rom() + 3 * j,
                // The launch, in block 0's row, read at every position of an executed step
                // (never at a text position: a fixed address would read there too).
                _ => (h.read, h.read_when, h.out) = (vec![Fixed(0)], vec![self.run_flag()], self.launch() + 3 * j),
            }
            h
        };
        let table = (0..s.slots).map(|j| head(0, j, true));
        let next = (0..s.slots).map(|j| head(0, j, false));
        let launch = (0..LAUNCH_WORDS).map(|k| head(2, k, true));
        Layout {
            groups: vec![s.blocks],
            d_model: self.d_model,
            one: self.one,
            value: vec![self.val[0], self.val[1], self.one],
            heads: table.chain((0..s.rom_words).map(|k| head(1, k, true))).chain(next).chain(launch).collect(),
        }
    }

    /// Layer 2, cleared at a reset record: a program with fewer blocks, slots or ROM words
    /// than the one before must not find the earlier one's rows.
    pub fn image(&self) -> DeltaNetWeights {
        limb_memory::cleared_at(limb_memory::weights(&self.image_layout()), self.reset())
    }

    /// Layer 3: the register one-hot, and `(lane, half)` from the mask and the rank.
    pub fn address(&self) -> Layer {
        let s = self.shape;
        let mut l = Layer::default();
        let entry = self.at(self.entry());
        // A store's index slot (either space) lights flag 0, a global half 1 or 2, a shared 3 or 4.
        let part = |_, part: usize, shared: bool| self.store_part() + if shared && part > 0 { part + 2 } else { part };
        l.one_hot(&[(entry, 1.0)], &self.by_field(self.reg(), part));
        let mask = (self.at(self.record + 2), (2 * s.lanes) as f32);
        l.one_hot(&[mask, (entry + 1, 1.0)], &self.by_rank(|lane, half| self.lane_half() + 2 * lane + half));
        // The next slot's lane, once per half: the same decode on the next entry, each value
        // sent to `(lane, half)` whatever the entry's own half.
        let next = self.at(self.next_entry());
        for half in 0..2 {
            let targets = self.by_rank(|lane, _| self.next_lane(half) + 2 * lane + half);
            l.one_hot(&[mask, (next + 1, 1.0)], &targets);
        }
        self.thread_units(&mut l);
        self.memory_units(&mut l);
        l.shifted(self.one)
    }

    /// A memory token's row (§12): the `j`-th VAL token after a memory record `(warp 3, page
    /// p, mask 0)` is half `j mod 2` of word `j / 2` of page `p`. One AND unit per target and
    /// slot; elsewhere every group is 0 and the memory layers write nothing.
    fn memory_units(&self, l: &mut Layer) {
        let [pages, words, _] = MEMORY_GROUPS;
        let on = [self.image_flag(), self.warp() + 3].map(|c| self.at(c));
        let (page, word) = (self.at(self.memory()), self.at(self.memory() + pages));
        let half = word + words;
        for p in 0..pages {
            super::exec::and_unit(l, &[on[0], on[1], self.at(self.block() + p)], &[], vec![(0, 1.0)], page + p, 1.0);
        }
        for j in 0..2 * words {
            let slot = self.at(self.slot + 1 + j);
            for to in [word + j / 2, half + j % 2] {
                super::exec::and_unit(l, &[on[0], on[1], slot], &[], vec![(0, 1.0)], to, 1.0);
            }
        }
    }

    /// Where a store's halves go (§13): the latch holds the word index its first slot sent
    /// (written there, read at every exec position), for the two slots after it.
    pub fn store_latch(&self) -> DeltaNetWeights {
        let mut head = Head::new(&[], &[self.store_part()], vec![], self.latched());
        head.read_when = vec![self.exec_flag()];
        let layout = Layout {
            groups: vec![],
            d_model: self.d_model,
            one: self.one,
            value: self.val.to_vec(),
            heads: vec![head],
        };
        limb_memory::weights(&layout)
    }

    /// After the latch: at a global store's low and high slot, the memory groups of its word
    /// (the latched index, one-hot page and word, and the half), so the load mixers write the
    /// token's limbs there as they write the prompt's memory tokens; at a shared store's, the
    /// shared groups' word and half. Elsewhere the index's steps are pushed below 0 and nothing
    /// fires. Beside them the step's thread block one-hot (the shared groups' first) at every
    /// position of an executed step: the shared mixers read and write in its rows.
    pub fn store_units(&self) -> Layer {
        let [pages, words, _] = MEMORY_GROUPS;
        let [ctas, shared_words, _] = shared_groups(&self.shape);
        let mut l = Layer::default();
        let (index, flag) = (self.at(self.latched()), |k: usize| self.at(self.store_part() + k));
        // (first channel, digit of the word index, words, the halves' flags)
        type Digit = (usize, fn(usize) -> usize, usize, [usize; 2]);
        let digits: [Digit; 3] = [
            (self.memory(), |w| w / MEMORY_GROUPS[1], pages * words, [1, 2]),
            (self.memory() + pages, |w| w % MEMORY_GROUPS[1], pages * words, [1, 2]),
            (self.shared() + ctas, |w| w, shared_words, [3, 4]),
        ];
        for (at, digit, n, [low, high]) in digits {
            let terms = [(index, 1.0), (flag(low), 1024.0), (flag(high), 1024.0), (0, -1024.0)];
            let mut targets: Vec<Option<usize>> = (0..n).map(|w| Some(self.at(at + digit(w)))).collect();
            targets.push(None);
            l.one_hot(&terms, &targets);
        }
        let halves = [self.memory() + pages + words, self.shared() + ctas + shared_words].map(|c| self.at(c));
        for k in 0..4 {
            super::exec::and_unit(&mut l, &[flag(1 + k)], &[], vec![(0, 1.0)], halves[k / 2] + k % 2, 1.0);
        }
        let cta = [(self.at(self.thread() + 1), 1.0), (self.at(self.run_flag()), 1024.0), (0, -1024.0)];
        let mut targets: Vec<Option<usize>> = (0..ctas).map(|c| Some(self.at(self.shared() + c))).collect();
        targets.push(None);
        l.one_hot(&cta, &targets);
        l.shifted(self.one)
    }

    /// The step's warp's first thread index and thread block (§11), as the interpreter lays
    /// warps out: each thread block's `ntid / lanes` warps in order. Both are functions of
    /// `c = warps · (ntid / lanes − 1) + warp`, one step unit per value (the differences
    /// telescope). Outside an executed step `ntid` reads 0, `c` is negative and nothing fires.
    /// `ntid / lanes` is exact for the power-of-two lane counts the tokens allow.
    fn thread_units(&self, l: &mut Layer) {
        let (warps, lanes) = (self.shape.warps, self.shape.lanes);
        let f = |c: usize| {
            let (per_block, warp) = (c / warps + 1, c % warps);
            [lanes * (warp % per_block), warp / per_block].map(|v| v as f32)
        };
        let terms = [(self.at(self.launch()), (warps as f32) / (lanes as f32)), (self.at(self.record), 1.0)];
        let [first_tid, cta] = [0, 1].map(|i| self.at(self.thread() + i));
        for c in 1..warps * (self.shape.block_threads / lanes) {
            let ([t, b], [t0, b0]) = (f(c), f(c - 1));
            let down: Vec<(usize, f32)> =
                [(first_tid, t - t0), (cta, b - b0)].into_iter().filter(|d| d.1 != 0.0).collect();
            if !down.is_empty() {
                l.step(&terms, (c + warps) as f32, &down);
            }
        }
    }

    /// For each value of a table entry's register field, where it goes: register `r` to `reg + r`,
    /// part `p` of instruction `i`'s store to `store(i, p, shared)`, anything else nowhere.
    pub(super) fn by_field(&self, reg: usize, store: impl Fn(usize, usize, bool) -> usize) -> Vec<Option<usize>> {
        let block_len = self.shape.rom_words / WORDS;
        let mut targets: Vec<Option<usize>> =
            (0..STORE_FIELD).map(|r| (r < self.shape.regs).then(|| self.at(reg + r))).collect();
        let slot = |k: usize| store(k % (3 * block_len) / 3, k % 3, k >= 3 * block_len);
        targets.extend((0..6 * block_len).map(|k| Some(self.at(slot(k)))));
        targets.push(None);
        targets
    }

    /// For each value of `c = 2·lanes·mask + 2·rank + half`, the channel `to(lane, half)` of the
    /// lane that the rank-th set bit of the mask names (relative to the bias), or `None` where
    /// the mask has fewer lanes.
    fn by_rank(&self, to: impl Fn(usize, usize) -> usize) -> Vec<Option<usize>> {
        let lanes = self.shape.lanes;
        (0..(2 * lanes) << lanes)
            .map(|c| {
                let (mask, rank, half) = (c / (2 * lanes), c % (2 * lanes) / 2, c % 2);
                let lane = (0..lanes).filter(|l| mask & 1 << l != 0).nth(rank)?;
                Some(self.at(to(lane, half)))
            })
            .collect()
    }

    /// The register file's layout: rows `warp × (lane, half) × register`, written at exec tokens
    /// whose table row is set, read at the probe's address.
    /// Where an exec VAL token writes its limbs in the register rows: the warp one-hot, the
    /// `(lane, half)` one-hot, the register one-hot, and the table row's "set" flag that must
    /// be 1 (the executor's shuffle mixers hold the same rows, §18).
    pub fn file_writes(&self) -> [usize; 4] {
        [self.warp(), self.lane_half(), self.reg(), self.entry() + 2]
    }

    pub fn file_layout(&self) -> Layout {
        let s = self.shape;
        let [warp, lane_half, reg, _] = self.file_writes();
        let address = [warp, lane_half, reg];
        let [w, lh, r, on] = self.probe();
        let mut probe = Head::new(&address, &[self.entry() + 2], vec![Stream(w), Stream(lh), Stream(r)], self.read());
        probe.read_when = vec![on];
        // The next slot's lane's registers, a head per register and half.
        let load = |(reg, half): (usize, usize)| {
            let read = vec![Stream(self.warp()), Stream(self.next_lane(half)), Fixed(reg)];
            let mut h = Head::new(&address, &[self.entry() + 2], read, self.local() + 4 * reg + 2 * half);
            h.read_when = vec![self.run_flag(), self.next_entry() + 2];
            h
        };
        let loads = (0..s.regs).flat_map(|r| [(r, 0), (r, 1)]).map(load);
        Layout {
            groups: vec![s.warps, 2 * s.lanes, s.regs],
            d_model: self.d_model,
            one: self.one,
            value: self.val.to_vec(),
            heads: core::iter::once(probe).chain(loads).collect(),
        }
    }

    /// Layer 4, cleared at a reset record: a launch's registers start at 0, as the
    /// interpreter's do.
    pub fn file(&self) -> DeltaNetWeights {
        limb_memory::cleared_at(limb_memory::weights(&self.file_layout()), self.reset())
    }

    /// The register `reg` of `lane` in `warp` as the file's state holds it: 0 if never written,
    /// `None` if a half's row is not an exact limb row.
    pub fn value(&self, file: &impl super::deltanet::StateRows, warp: usize, lane: usize, reg: usize) -> Option<u32> {
        let layout = self.file_layout();
        limb_memory::word(file, &layout, [0, 1].map(|half| layout.row(&[warp, 2 * lane + half, reg])))
    }

    /// A launch's whole prompt: the reset record and the program image
    /// ([`Self::image_tokens`]), global memory ([`Self::memory_tokens`]), then the launch
    /// ([`Self::launch_tokens`]), whose last word ends every prompt (where the model names the
    /// first record, `next_record`).
    pub fn prompt_tokens(
        &self,
        program: &Program,
        launch: &Launch,
        memory: &[u32],
    ) -> Result<Vec<Token>, ImageTooLarge> {
        let mut tokens = self.image_tokens(program)?;
        tokens.extend(self.memory_tokens(memory)?);
        tokens.extend(self.launch_tokens(launch)?);
        Ok(tokens)
    }

    /// The prompt's program image: the reset record, the live-out table (per block with
    /// live-out registers, a table record and one VAL token per slot), then the ROM (per block,
    /// a ROM record and its words).
    pub fn image_tokens(&self, program: &Program) -> Result<Vec<Token>, ImageTooLarge> {
        let mut tokens = vec![RESET];
        tokens.extend(self.table_tokens(program)?);
        for (b, block) in program.blocks.iter().enumerate() {
            let words = block_words(block)?;
            if words.len() > self.shape.rom_words {
                return Err(ImageTooLarge::Rom { block: b, words: words.len(), max: self.shape.rom_words });
            }
            tokens.push(Token::Record { warp: 1, block: b as u32, mask: 0 });
            tokens.extend(words.into_iter().map(Token::Val));
        }
        Ok(tokens)
    }

    /// Global memory as the prompt writes it (§12): per page of 16 words, a memory record
    /// `(warp 3, page, mask 0)` and each word's low and high half. A page of zeros is left out:
    /// the reset record has cleared the rows, and a row never written reads 0.
    pub fn memory_tokens(&self, global: &[u32]) -> Result<Vec<Token>, ImageTooLarge> {
        let [pages, words, _] = MEMORY_GROUPS;
        if global.len() > pages * words {
            return Err(ImageTooLarge::Memory { words: global.len(), max: pages * words });
        }
        let mut tokens = Vec::new();
        for p in 0..pages {
            let word = |w: usize| global.get(p * words + w).copied().unwrap_or(0);
            if (0..words).all(|w| word(w) == 0) {
                continue;
            }
            tokens.push(Token::Record { warp: 3, block: p as u32, mask: 0 });
            tokens.extend((0..words).flat_map(|w| [word(w) as u16, (word(w) >> 16) as u16]).map(Token::Val));
        }
        Ok(tokens)
    }

    /// The launch part: `(warp 2, block 0, mask 0)`, the block's threads rounded up to whole
    /// warps, the grid, and every parameter's two halves (the missing ones 0, as the
    /// interpreter reads them, so that a later launch leaves nothing of an earlier one).
    pub fn launch_tokens(&self, launch: &Launch) -> Result<Vec<Token>, ImageTooLarge> {
        let s = self.shape;
        let ntid = launch.block.next_multiple_of(s.lanes);
        let bad = |why| {
            Err(ImageTooLarge::Launch { grid: launch.grid, block: launch.block, params: launch.params.len(), why })
        };
        if launch.params.len() > MAX_PARAMS {
            return bad("the machine takes at most 8 parameters");
        }
        if launch.grid == 0 || launch.block == 0 || ntid > s.block_threads || launch.grid * ntid / s.lanes > s.warps {
            return bad("not a launch of this machine's warps");
        }
        let mut words = vec![ntid as u16, launch.grid as u16];
        for i in 0..MAX_PARAMS {
            let p = launch.params.get(i).copied().unwrap_or(0);
            words.extend([p as u16, (p >> 16) as u16]);
        }
        let record = Token::Record { warp: 2, block: 0, mask: 0 };
        Ok(core::iter::once(record).chain(words.into_iter().map(Token::Val)).collect())
    }

    fn table_tokens(&self, program: &Program) -> Result<Vec<Token>, ImageTooLarge> {
        let s = self.shape;
        let blocks = program.blocks.len();
        if blocks > s.blocks {
            return Err(ImageTooLarge::Blocks { blocks, max: s.blocks });
        }
        let mut tokens = Vec::new();
        for (b, &set) in sent(program).iter().enumerate() {
            let (regs, stores) = (live_regs(set), store_slots(&program.blocks[b]));
            let slots = s.lanes * (2 * regs.len() + 3 * stores.len());
            let block_len = s.rom_words / WORDS;
            if slots > s.slots {
                let (words, stores) = (regs.len(), stores.len());
                return Err(ImageTooLarge::Slots { block: b, words, stores, slots, max: s.slots });
            }
            if slots == 0 {
                continue;
            }
            tokens.push(Token::Record { warp: 0, block: b as u32, mask: 0 });
            for rank in 0..s.lanes as u16 {
                for &r in &regs {
                    tokens.extend((0..2).map(|half| Token::Val(r as u16 | (2 * rank + half) << 8)));
                }
                for &(i, shared) in &stores {
                    let field = |part: usize| (STORE_FIELD + 3 * (i + usize::from(shared) * block_len) + part) as u16;
                    tokens.extend((0..3).map(|part| Token::Val(field(part) | (2 * rank) << 8)));
                }
            }
        }
        Ok(tokens)
    }

    /// A step's tokens: its record, then for each active lane in order, the low and the high
    /// half of each live-out register's value after the step (`regs`: the warp's registers,
    /// lane by lane), then each of the lane's stores as its word index, low and high half
    /// (`stored`: the step's, as `Machine::step_stored` gives them).
    pub fn step_tokens(step: &StepRecord, live_out: u32, regs: &[Vec<u32>], stored: &[Stored]) -> Vec<Token> {
        let mut tokens = vec![Token::Record { warp: step.warp as u32, block: step.block as u32, mask: step.mask }];
        let active = regs.iter().enumerate().filter(|(l, _)| step.mask & 1 << l != 0);
        for (lane, values) in active {
            for r in live_regs(live_out) {
                tokens.extend([values[r] as u16, (values[r] >> 16) as u16].map(Token::Val));
            }
            for s in stored.iter().filter(|s| s.lane == lane) {
                tokens.extend([s.word as u16, s.value as u16, (s.value >> 16) as u16].map(Token::Val));
            }
        }
        tokens
    }
}

/// The registers each block's step sends (a bit set per block): its written registers that are
/// live after it; and where a block ending in a conditional branch would send nothing at all,
/// its predicate, so that each of its lanes has a start where the executor decides the lane's
/// next PC (`pc_rows`; 2,205 lanes of the suite, docs §24).
pub fn sent(program: &Program) -> Vec<u32> {
    block_carry(program)
        .iter()
        .zip(&program.blocks)
        .map(|(c, block)| match block.last() {
            Some(&Inst::Bra { c: Some(guard), .. }) if c.live_out_writes == 0 && store_slots(block).is_empty() => {
                1 << guard
            }
            _ => c.live_out_writes,
        })
        .collect()
}

/// The registers of a bit set, in order.
fn live_regs(set: u32) -> Vec<usize> {
    (0..32).filter(|r| set & 1 << r != 0).collect()
}

#[cfg(test)]
pub(crate) mod tests;
