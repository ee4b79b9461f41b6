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
//! 2. **The row** (Gated DeltaNet, one row, `limb_memory`): the lane's 60 register limbs,
//!    written where `start` holds (after the executor, so the registers after the block), read
//!    where `next` holds.
//! 3. **Output** (SwiGLU): where `next` holds, the kind channel goes to 0 (VAL) and the VAL limbs
//!    to the named half's: `val_l += [next ∧ reg r ∧ half h] · (row_{r,h,l} − val_l)`.
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
use super::register_file::RegisterFile;
use alloc::vec;
use alloc::vec::Vec;

/// The results row's channels, after the register file's and the executor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Results {
    pub registers: RegisterFile,
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
    /// The row read back: the lane's registers, four limbs each (low first).
    pub fn row(&self) -> usize {
        self.half() + 2
    }

    pub fn len(&self) -> usize {
        self.row() + LIMBS * self.registers.shape.regs - self.first
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
        l.one_hot(&[(next, 1.0)], &(0..s.regs).map(|r| Some(self.at(self.reg() + r))).collect::<Vec<_>>());
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
        let value = (0..LIMBS * rf.shape.regs).map(|i| rf.local() + i).collect();
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
        l.shifted(rf.one)
    }
}
