//! Each lane's PC in the spliced model's state (issue #22, `docs/qwengpu-second-machine.md`
//! §25): the rows that `sequencer` reads, written as it writes them, by the layers.
//!
//! A Gated DeltaNet with one head per (warp of a thread block, lane) and one row per thread block
//! (`limb_memory`), cleared at the reset record. Head `(j, l)` writes lane `l` of the block's
//! warp `j` with the lane's next PC
//! ([`sequencer::next_pc`](super::sequencer::next_pc)) where the lane's step is decided:
//! - at a step's record, for every lane of the mask: the PC does not depend on the lane unless
//!   the block ends in a conditional branch;
//! - at each lane's start (where the executor has run the block on that lane's registers), for
//!   that lane: with a conditional branch, its own predicate decides. Every lane of such a block
//!   has a start: a block that would send nothing sends its predicate (`register_file::sent`).
//!
//! No write reads a row, so the rows need no read-modify-write (§22's second bound).
//!
//! **The next PC**, from the block's ROM words and the lane's registers after the block, in three
//! SwiGLU layers, every channel a small integer:
//! 1. (beside the executor's first stage) per instruction `i`: `cond_i = [flags_i ≥ 4]` (word 2's
//!    high byte: 4 `bra` on `c`, 8 on `c = 0`; every other instruction's flags are below 4), the
//!    sums `neg = Σ [flags_i ≥ 8]`, `bra = Σ [op_i = bra]`, `exit = Σ [op_i = exit]`, `bar = Σ
//!    [op_i = bar]` (only a block's last instruction transfers control), the mask's bits, and
//!    the warp's place in its thread block one-hot (its first thread index over the lanes);
//! 2. (beside the results' output) `T = Σ_i Σ_r [S_r − 1024(c_i − r) + 16384(cond_i − 1) ≥ 1] +
//!    [S_r + 1024(c_i − r) + 16384(cond_i − 1) ≥ 1]`, with `S_r` the sum of register `r`'s four
//!    limbs (at most 1,020): for the branch's instruction exactly one of each pair fires where
//!    `r ≠ c_i`, and both or neither where `r = c_i`, as `S_c ≥ 1`; every other instruction's
//!    penalty (−16,384) outweighs the rest. So `T = cond · (14 + 2·[reg_c ≠ 0])`;
//! 3. `pc = b + 1 + [nz − neg = 1]·(t − b − 1) + [neg − nz = 1]·(t − b − 1) + [bra − cond =
//!    1]·(t − b − 1) + [exit]·(63 − b)`, with `nz = (T − 14·cond)/2`, `t` the sum of the words-3
//!    low limbs (only a branch has a target) and `b` the record's block. Each product is a gated
//!    unit (`Layer::gated`'s trick) whose gate is `512·z − 256` for `z` in {−1, 0, 1}; and the
//!    write flags `w_l = [record ∧ bit_l] ∨ [start ∧ lane = l]`.

use super::deltanet::DeltaNetWeights;
use super::isa::Op;
use super::limb_memory::{self, Digit, Head, Layout};
use super::limbs::{Layer, Unit, LIMBS};
use super::program_image::{opcode, WORDS};
use super::register_file::RegisterFile;
use super::sequencer::EXITED;
use alloc::vec;
use alloc::vec::Vec;

/// The PC rows' channels, after the results row's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PcRows {
    pub registers: RegisterFile,
    /// `results::Results::start`: 1 where the next slot begins a lane.
    pub start: usize,
    /// Its own channels from here ([`Self::len`]).
    pub first: usize,
}

impl PcRows {
    fn lanes(&self) -> usize {
        self.registers.shape.lanes
    }
    fn block_len(&self) -> usize {
        self.registers.shape.rom_words / WORDS
    }
    /// `[op_i = bar]` summed: the block ends in `bar.sync`.
    pub fn bar(&self) -> usize {
        self.first
    }
    /// The step's warp's place in its thread block, one-hot ([`Self::warps`] channels).
    pub fn warp_in_cta(&self) -> usize {
        self.bar() + 1
    }
    /// Warps a thread block holds at most.
    pub fn warps(&self) -> usize {
        self.registers.shape.block_threads / self.lanes()
    }
    /// `cond_i` per instruction, then `neg`, `bra`, `exit`. From here to [`Self::read`] every
    /// channel is spent once the rows' layer has written ([`Self::scratch`]).
    fn cond(&self) -> usize {
        self.warp_in_cta() + self.warps()
    }
    fn neg(&self) -> usize {
        self.cond() + self.block_len()
    }
    fn bra(&self) -> usize {
        self.neg() + 1
    }
    fn exit(&self) -> usize {
        self.bra() + 1
    }
    /// The record's mask bits.
    fn bits(&self) -> usize {
        self.exit() + 1
    }
    fn t(&self) -> usize {
        self.bits() + self.lanes()
    }
    /// Lane `l`'s write flag.
    fn write(&self) -> usize {
        self.t() + 1
    }
    /// The next PC of the lane the position decides.
    pub fn pc(&self) -> usize {
        self.write() + self.lanes()
    }
    /// The channels no layer reads after the rows' (the next PC's inputs, the write flags and
    /// the value), each a small integer (`|v| < 1024`): free for the next record's decoder.
    pub fn scratch(&self) -> core::ops::Range<usize> {
        self.cond()..self.read()
    }
    /// Where the rows of the step's thread block are read: lane `l` of its warp `j` at
    /// `read() + lanes·j + l`.
    pub fn read(&self) -> usize {
        self.pc() + 1
    }
    pub fn len(&self) -> usize {
        self.read() + self.warps() * self.lanes() - self.first
    }
    pub fn is_empty(&self) -> bool {
        false
    }

    fn at(&self, c: usize) -> usize {
        c - self.registers.one
    }
    /// ROM word `w` of instruction `i`: its low limb's channel (the high limb's is next).
    fn word(&self, i: usize, w: usize) -> usize {
        self.at(self.registers.rom() + 3 * (WORDS * i + w))
    }

    /// Step 1, beside the executor's first stage: the instructions' control fields and the mask's
    /// bits.
    pub fn decode(&self) -> Layer {
        let mut l = Layer::default();
        let equal = |l: &mut Layer, x: usize, v: Option<u8>, to: usize| {
            if let Some(v) = v {
                l.step(&[(x, 1.0)], f32::from(v), &[(to, 1.0)]);
                l.step(&[(x, 1.0)], f32::from(v) + 1.0, &[(to, -1.0)]);
            }
        };
        for i in 0..self.block_len() {
            let flags = self.word(i, 2) + 1;
            l.step(&[(flags, 1.0)], 4.0, &[(self.at(self.cond()) + i, 1.0)]);
            l.step(&[(flags, 1.0)], 8.0, &[(self.at(self.neg()), 1.0)]);
            equal(&mut l, self.word(i, 0), opcode(Op::Bra), self.at(self.bra()));
            equal(&mut l, self.word(i, 0), opcode(Op::Exit), self.at(self.exit()));
            equal(&mut l, self.word(i, 0), opcode(Op::Bar), self.at(self.bar()));
        }
        // The warp's place in its thread block: its first thread index over the lanes, in an
        // executed step (elsewhere the sum is negative and no target is lit).
        let run = self.at(self.registers.run_flag());
        let place = [(self.at(self.registers.thread()), 1.0 / self.lanes() as f32), (run, 1024.0), (0, -1024.0)];
        l.one_hot(&place, &(0..self.warps()).map(|j| Some(self.at(self.warp_in_cta()) + j)).collect::<Vec<_>>());
        // bit_l = Σ_v (bit_l(v) − bit_l(v − 1))·[mask ≥ v] over the mask's values.
        let mask = self.at(self.registers.record + 2);
        for lane in 0..self.lanes() {
            for v in 1..1u32 << self.lanes() {
                let change = (v >> lane & 1) as f32 - ((v - 1) >> lane & 1) as f32;
                if change != 0.0 {
                    l.step(&[(mask, 1.0)], v as f32, &[(self.at(self.bits()) + lane, change)]);
                }
            }
        }
        l.shifted(self.registers.one)
    }

    /// Step 2, after the executor: `T` from the lane's registers after the block.
    pub fn predicate(&self) -> Layer {
        let rf = &self.registers;
        let mut l = Layer::default();
        let t = self.at(self.t());
        for i in 0..self.block_len() {
            let (c, cond) = (self.word(i, 2), self.at(self.cond()) + i);
            for r in 0..rf.shape.regs {
                for sign in [-1.0f32, 1.0] {
                    let mut terms: Vec<(usize, f32)> =
                        (0..LIMBS).map(|k| (self.at(rf.local()) + LIMBS * r + k, 1.0)).collect();
                    terms.push((c, 1024.0 * sign));
                    terms.push((cond, 16384.0));
                    terms.push((0, -1024.0 * sign * r as f32 - 16384.0));
                    l.step(&terms, 1.0, &[(t, 1.0)]);
                }
            }
        }
        l.shifted(rf.one)
    }

    /// Step 3: the next PC and the lanes' write flags.
    pub fn next_pc(&self) -> Layer {
        let rf = &self.registers;
        let mut l = Layer::default();
        let pc = self.at(self.pc());
        let b = self.at(rf.record + 1);
        let cond: Vec<(usize, f32)> = (0..self.block_len()).map(|i| (self.at(self.cond()) + i, 1.0)).collect();
        let target: Vec<(usize, f32)> = (0..self.block_len()).map(|i| (self.word(i, 3), 1.0)).collect();
        l.pass(&[(b, 1.0), (0, 1.0)], &[(pc, 1.0)]);
        // `[z = 1]·y` for `z` in {−1, 0, 1}: silu(512z − 256)·y/256.
        let mut gated = |z: Vec<(usize, f32)>, y: Vec<(usize, f32)>| {
            let mut gate: Vec<(usize, f32)> = z.into_iter().map(|(c, w)| (c, 512.0 * w)).collect();
            gate.push((0, -256.0));
            let up = y.into_iter().map(|(c, w)| (c, w / 256.0)).collect();
            l.units.push(Unit { gate, up, down: vec![(pc, 1.0)] });
        };
        let mut jump = target.clone();
        jump.extend([(b, -1.0), (0, -1.0)]);
        // nz − neg = T/2 − 7·cond − neg, and its negation.
        let (t, neg) = (self.at(self.t()), self.at(self.neg()));
        let mut nz_minus_neg = vec![(t, 0.5), (neg, -1.0)];
        nz_minus_neg.extend(cond.iter().map(|&(c, _)| (c, -7.0)));
        let neg_minus_nz = nz_minus_neg.iter().map(|&(c, w)| (c, -w)).collect();
        gated(nz_minus_neg, jump.clone());
        gated(neg_minus_nz, jump.clone());
        let mut uncond = vec![(self.at(self.bra()), 1.0)];
        uncond.extend(cond.iter().map(|&(c, _)| (c, -1.0)));
        gated(uncond, jump);
        gated(vec![(self.at(self.exit()), 1.0)], vec![(0, f32::from(EXITED) - 1.0), (b, -1.0)]);
        // w_l = [record ∧ bit_l] + [start ∧ lane = l] − [both].
        let record = self.at(rf.slot);
        for lane in 0..self.lanes() {
            let (bit, start, at) =
                (self.at(self.bits()) + lane, self.at(self.start), self.at(rf.next_lane(0) + 2 * lane));
            let w = [(self.at(self.write()) + lane, 1.0)];
            l.step(&[(record, 1.0), (bit, 1.0)], 2.0, &w);
            l.step(&[(start, 1.0), (at, 1.0)], 2.0, &w);
            l.step(&[(record, 1.0), (bit, 1.0), (start, 1.0), (at, 1.0)], 4.0, &[(w[0].0, -1.0)]);
        }
        l.shifted(rf.one)
    }

    /// The rows: a head per (warp of a thread block, lane) and a row per thread block (the
    /// shared groups' one-hot block, set at every position of an executed step). Head `(j, l)`
    /// writes the next PC where lane `l`'s write flag is set in the block's warp `j`, and every
    /// head reads the step's thread block into [`Self::read`]: the next record's decoder sees
    /// every warp of the block at once (`next_record`).
    pub fn layout(&self) -> Layout {
        let rf = &self.registers;
        let cta = vec![Digit::Stream(rf.shared())];
        let heads = (0..self.warps() * self.lanes())
            .map(|h| Head {
                write: cta.clone(),
                write_when: vec![self.write() + h % self.lanes(), self.warp_in_cta() + h / self.lanes()],
                read: cta.clone(),
                read_when: vec![],
                out: self.read() + h,
            })
            .collect();
        Layout { groups: vec![rf.shape.warps], d_model: rf.d_model, one: rf.one, value: vec![self.pc()], heads }
    }

    /// The layer, cleared at the reset record.
    pub fn weights(&self) -> DeltaNetWeights {
        limb_memory::cleared_at(limb_memory::weights(&self.layout()), self.registers.reset())
    }

    /// Lane `lane`'s PC in warp `warp`'s row of `net`, for thread blocks of `per_cta` warps (an
    /// unwritten row is block 0, where a launch starts).
    pub fn pc_of(&self, net: &impl super::deltanet::StateRows, per_cta: usize, warp: usize, lane: usize) -> Option<u8> {
        let (head, row) = ((warp % per_cta) * self.lanes() + lane, warp / per_cta);
        match limb_memory::row_limbs(net, &self.layout(), head, row) {
            Some(limbs) => limbs.first().map(|&p| p as u8),
            None => net.row(head, row).iter().all(|&v| v == 0.0).then_some(0),
        }
    }
}
