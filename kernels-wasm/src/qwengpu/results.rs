//! The step's values, predicted (issue #22, `docs/qwengpu-second-machine.md` §10). Where the
//! executor (`exec`) has run a lane's block, the lane's registers go into a results row; at
//! every position of the step an output layer then makes the stream name the token of the
//! *next* slot: the half of the register that the live-out table names for that slot. So the
//! model's own argmax predicts a step's VAL tokens.
//!
//! 1. **Flags** (beside the executor's first layer): `next`, the step has a next slot (the
//!    table's next entry is set and its rank names a lane of the mask); `start`, that slot
//!    begins a lane (its lane is not the current slot's, or the position is the record); one-hot
//!    the next slot's register and half, from the next table entry (`register_file`).
//! 2. **The row** (Gated DeltaNet, one row, `limb_memory`): the lane's 60 register limbs and the
//!    stores the executor kept (per instruction its word index and word, §13), written where
//!    `start` holds (after the executor, so the registers after the block), read where `next`
//!    holds.
//! 3. **Output** (SwiGLU): where `next` holds, the kind channel goes to 0 (VAL) and the VAL limbs
//!    to the named half's: `val_l += [next ∧ reg r ∧ half h] · (row_{r,h,l} − val_l)`; at a
//!    store's slots its word index, low half or high half.
//!
//! **Why a row.** The file loads the next lane's registers at every position, but from a
//! lane's second slot on its first values are already written back: running the block again on
//! them would apply it twice (`r1 = r1 + 1`). Only a lane's start sees them as the step began.
//! At the step's last position no next slot is set and nothing is written: the next token is a
//! record, which the sequencer (not built yet) must name.

use super::deltanet::DeltaNetWeights;
use super::exec::and_unit;
use super::limb_memory::{self, Head, Layout};
use super::limbs::{Layer, LIMBS};
use super::program_image::WORDS;
use super::register_file::RegisterFile;
use alloc::vec;
use alloc::vec::Vec;

/// The results row's channels, after the register file's and the executor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Results {
    pub registers: RegisterFile,
    /// The executor's kept stores (`Exec::stores`): per instruction its word index and four limbs.
    pub stores: usize,
    /// Its own channels from here ([`Self::len`]).
    pub first: usize,
}

impl Results {
    /// 1 where the next slot begins a lane.
    pub fn start(&self) -> usize {
        self.first
    }
    /// 1 where the next slot is one of the step's.
    pub fn next(&self) -> usize {
        self.first + 1
    }
    /// One-hot the next slot's register, then its half.
    fn reg(&self) -> usize {
        self.first + 2
    }
    fn half(&self) -> usize {
        self.reg() + self.registers.shape.regs
    }
    /// One-hot the next slot's store part: instruction `i`'s part `p` at `3·i + p`.
    fn store(&self) -> usize {
        self.half() + 2
    }
    fn block_len(&self) -> usize {
        self.registers.shape.rom_words / WORDS
    }
    /// The row read back: the lane's registers, four limbs each (low first), then its stores as
    /// the executor keeps them.
    pub fn row(&self) -> usize {
        self.store() + 3 * self.block_len()
    }
    fn row_len(&self) -> usize {
        LIMBS * self.registers.shape.regs + (1 + LIMBS) * self.block_len()
    }

    pub fn len(&self) -> usize {
        self.row() + self.row_len() - self.first
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// A channel relative to the bias, as `limbs::Layer` builds.
    fn at(&self, c: usize) -> usize {
        c - self.registers.one
    }

    /// The flags: units for a layer after the register file's address layer.
    pub fn flags(&self) -> Layer {
        let (rf, s) = (&self.registers, self.registers.shape);
        let mut l = Layer::default();
        let next = self.at(rf.next_entry());
        l.one_hot(&[(next, 1.0)], &rf.by_field(self.reg(), |i, part, _| self.store() + 3 * i + part));
        // The entry's second limb is `2·rank + half`.
        let halves: Vec<_> = (0..2 * s.lanes).map(|v| Some(self.at(self.half() + v % 2))).collect();
        l.one_hot(&[(next + 1, 1.0)], &halves);
        // `next`: the next slot is set and its rank names a lane of the mask (the table has
        // slots for every rank; a mask with fewer lanes ends the step before them). `start =
        // next − [same lane]`: at an exec token the current `(lane, half)` and the next slot's
        // lane are both one-hot, so at most one AND fires; at the record none does.
        let (start, next_flag) = (self.at(self.start()), self.at(self.next()));
        for lane in 0..s.lanes {
            let on = [next + 2, self.at(rf.next_lane(0) + 2 * lane)];
            and_unit(&mut l, &on, &[], vec![(0, 1.0)], start, 1.0);
            and_unit(&mut l, &on, &[], vec![(0, 1.0)], next_flag, 1.0);
            for half in 0..2 {
                let on =
                    [rf.exec_flag(), rf.lane_half() + 2 * lane + half, rf.next_lane(0) + 2 * lane].map(|c| self.at(c));
                and_unit(&mut l, &on, &[], vec![(0, 1.0)], start, -1.0);
            }
        }
        l.shifted(rf.one)
    }

    /// The row: no address (one row), written at a lane's start, read where a next slot is set.
    pub fn layout(&self) -> Layout {
        let rf = &self.registers;
        let registers = (0..LIMBS * rf.shape.regs).map(|i| rf.local() + i);
        let value = registers.chain((0..(1 + LIMBS) * self.block_len()).map(|i| self.stores + i)).collect();
        let mut head = Head::new(&[], &[self.start()], vec![], self.row());
        head.read_when = vec![self.next()];
        Layout { groups: vec![], d_model: rf.d_model, one: rf.one, value, heads: vec![head] }
    }

    pub fn weights(&self) -> DeltaNetWeights {
        limb_memory::weights(&self.layout())
    }

    /// The output: the next slot's token in the kind and VAL channels.
    pub fn output(&self) -> Layer {
        let rf = &self.registers;
        let mut l = Layer::default();
        let (set, kind) = (self.at(self.next()), self.at(rf.kind));
        and_unit(&mut l, &[set], &[], vec![(kind, -1.0)], kind, 1.0);
        for r in 0..rf.shape.regs {
            for half in 0..2 {
                let on = [set, self.at(self.reg() + r), self.at(self.half() + half)];
                for (limb, &val) in rf.val.iter().enumerate() {
                    let (val, from) = (self.at(val), self.at(self.row() + LIMBS * r + 2 * half + limb));
                    and_unit(&mut l, &on, &[], vec![(from, 1.0), (val, -1.0)], val, 1.0);
                }
            }
        }
        // A store's slots: its word index (high limb 0), then its word's low and high half.
        let stores = self.row() + LIMBS * rf.shape.regs;
        for i in 0..self.block_len() {
            let kept = stores + (1 + LIMBS) * i;
            for (part, limbs) in
                [[Some(kept), None], [Some(kept + 1), Some(kept + 2)], [Some(kept + 3), Some(kept + 4)]]
                    .into_iter()
                    .enumerate()
            {
                let on = [set, self.at(self.store() + 3 * i + part)];
                for (&val, from) in rf.val.iter().zip(limbs) {
                    let val = self.at(val);
                    let mut up = vec![(val, -1.0)];
                    up.extend(from.map(|c| (self.at(c), 1.0)));
                    and_unit(&mut l, &on, &[], up, val, 1.0);
                }
            }
        }
        l.shifted(rf.one)
    }
}
