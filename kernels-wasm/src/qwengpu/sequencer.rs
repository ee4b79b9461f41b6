//! What the second machine's sequencer computes, in plain Rust (issue #22,
//! `docs/qwengpu-second-machine.md` §24): the next record from state rows that are written
//! without being read. The layers that will name each next record are to be checked against
//! this, and this is checked against the interpreter's records on the whole suite.
//!
//! **The rows.** One PC per (warp, lane): the block the lane runs next, or [`EXITED`]. A launch
//! clears them to 0 (the decay gate of `limb_memory::cleared_at`), which is every lane's first
//! PC. A step writes only the lanes of its mask, each with a value computed from the record, the
//! block's last instruction and the lane's own predicate ([`next_pc`]). No write depends on a
//! row's old value, so each is one DeltaNet write at one position (§22's second bound).
//!
//! **The next record** reads the rows after the step's writes ([`Sequencer::next`]):
//! - the same warp, unless its block ended in `bar.sync` or it has no live lane left;
//! - else the next warp of the thread block with a live lane, wrapping round to the first (a
//!   barrier's release). `interp::schedule` keeps the warps before the current one waiting or
//!   finished and the ones after it not waiting, so this is its rule without barrier state;
//! - else the next thread block's first warp, or the end of the launch;
//! - the block is the warp's lowest PC and the mask the lanes at it.

use super::interp::StepRecord;
use super::isa::Inst;
use alloc::vec;
use alloc::vec::Vec;

/// The PC of a lane that exited: past every ROM block (64 fit in the record's block field).
pub const EXITED: u8 = 64;

/// The PC lane `l` of a step at block `block` goes to: `last` is the block's last instruction and
/// `guard` the lane's predicate register after the block (for a conditional branch).
pub fn next_pc(block: usize, last: Option<&Inst>, guard: u32) -> u8 {
    match last {
        Some(Inst::Exit) => EXITED,
        Some(&Inst::Bra { target, c, neg, .. }) if c.is_none() || (guard != 0) != neg => target as u8,
        _ => block as u8 + 1,
    }
}

/// What follows a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Step(StepRecord),
    /// Every warp of every thread block has finished.
    Done,
}

/// The PC rows of a launch and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequencer {
    pub lanes: usize,
    pub warps_per_cta: usize,
    pub ctas: usize,
    /// `pcs[warp][lane]`.
    pub pcs: Vec<Vec<u8>>,
}

impl Sequencer {
    /// A launch's rows, cleared: every lane at block 0.
    pub fn launch(lanes: usize, warps_per_cta: usize, ctas: usize) -> Sequencer {
        Sequencer { lanes, warps_per_cta, ctas, pcs: vec![vec![0; lanes]; warps_per_cta * ctas] }
    }

    /// The step's writes: each lane of `record.mask` gets its next PC (`guards[l]`: lane `l`'s
    /// predicate register after the block, read only for a conditional branch).
    pub fn write(&mut self, record: &StepRecord, last: Option<&Inst>, guards: &[u32]) {
        for l in (0..self.lanes).filter(|l| record.mask & 1 << l != 0) {
            self.pcs[record.warp][l] = next_pc(record.block, last, guards.get(l).copied().unwrap_or(0));
        }
    }

    /// The lowest PC of warp `w`'s live lanes, and those lanes.
    fn lowest(&self, w: usize) -> Option<(u8, u32)> {
        let low = self.pcs[w].iter().copied().filter(|&p| p != EXITED).min()?;
        Some((low, self.pcs[w].iter().enumerate().filter(|&(_, &p)| p == low).fold(0, |m, (l, _)| m | 1 << l)))
    }

    /// The record after a step of warp `warp` whose block ended in `last` (the first record of a
    /// launch: `Sequencer::first`).
    pub fn next(&self, warp: usize, last: Option<&Inst>) -> Next {
        let step = |w: usize| self.lowest(w).map(|(b, mask)| StepRecord { warp: w, block: b as usize, mask });
        if !matches!(last, Some(Inst::Bar)) {
            if let Some(r) = step(warp) {
                return Next::Step(r);
            }
        }
        let first = warp - warp % self.warps_per_cta;
        let n = self.warps_per_cta;
        if let Some(r) = (1..=n).map(|k| first + (warp - first + k) % n).find_map(step) {
            return Next::Step(r);
        }
        let next_cta = first + n;
        match (next_cta < self.warps_per_cta * self.ctas).then(|| step(next_cta)).flatten() {
            Some(r) => Next::Step(r),
            None => Next::Done,
        }
    }

    /// A launch's first record: warp 0 at its lowest PC.
    pub fn first(&self) -> Next {
        self.lowest(0).map_or(Next::Done, |(b, mask)| Next::Step(StepRecord { warp: 0, block: b as usize, mask }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::suite;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Every record of every suite kernel on the second machine is the one the rows name after
    /// the step before, and the launch ends where the interpreter's does.
    #[test]
    fn the_rows_name_every_record_of_the_suite() {
        let spec = MachineSpec::second();
        let (mut records, mut switches) = (0, 0);
        for k in suite::kernels() {
            let (kernel, p, mut m) = k.machine(k.ptx, &spec).unwrap_or_else(|e| panic!("{e}"));
            let block_threads = p.launch.block.next_multiple_of(spec.lanes);
            let mut seq = Sequencer::launch(spec.lanes, block_threads / spec.lanes, p.launch.grid);
            let mut want = seq.first();
            while let Some(r) = m.step().unwrap() {
                assert_eq!(want, Next::Step(r), "{}: step {}", k.name, m.steps);
                let last = kernel.program.blocks[r.block].last();
                let guards: Vec<u32> = match last {
                    Some(&Inst::Bra { c: Some(c), .. }) => {
                        m.warps[r.warp].regs.iter().map(|regs| regs[c as usize]).collect()
                    }
                    _ => Vec::new(),
                };
                seq.write(&r, last, &guards);
                want = seq.next(r.warp, last);
                records += 1;
                switches += usize::from(matches!(want, Next::Step(n) if n.warp != r.warp));
            }
            assert_eq!(want, Next::Done, "{}: the interpreter finished", k.name);
        }
        // The suite's launches have several warps and thread blocks, and barriers.
        assert!(records > 7_000 && switches > 300, "{records} records, {switches} warp switches");
    }

    #[test]
    fn a_lane_goes_to_its_own_next_pc() {
        let bra = |c, neg| Inst::Bra { target: 9, c, neg, join: 12 };
        assert_eq!(next_pc(4, Some(&bra(None, false)), 0), 9);
        assert_eq!(next_pc(4, Some(&bra(Some(2), false)), 7), 9);
        assert_eq!(next_pc(4, Some(&bra(Some(2), false)), 0), 5);
        assert_eq!(next_pc(4, Some(&bra(Some(2), true)), 0), 9);
        assert_eq!(next_pc(4, Some(&Inst::Exit), 0), EXITED);
        assert_eq!(next_pc(4, Some(&Inst::Bar), 0), 5);
        assert_eq!(next_pc(4, None, 0), 5);
    }
}
