//! What a machine step would have to carry in generated tokens, if a language model ran it with
//! one step per position (issue #22; the argument is in `docs/qwengpu-second-machine.md` §1).
//!
//! A step's results are computed in the upper layers of its position, and the next step reads
//! its operands in the lower layers of the next position, which sees the earlier position only
//! through the token sampled there. So every word a step writes that a later step reads must
//! travel in tokens: with 16-bit value tokens, two per word, after the step's record token:
//!
//! ```text
//! tokens(step) = 1 + 2 · active lanes · (live-out registers written + stores)
//! ```
//!
//! "Live-out registers written" are the registers the block writes that are live at its exit,
//! by liveness over the ROM's control flow, per thread (a lane's successors are the branch
//! target and the fall-through; the SIMT stack only orders lanes, it adds no paths). A value
//! written and read inside the block never leaves its position. Every store counts (a later
//! load or the host's VAL tokens read it), and its address is not counted: a store's address is
//! a register value of the same step, but which word it names is data, so a real design pays
//! up to 7 more bits for it. The figure is the bound a compiled design must pay; the
//! destination register needs no bits, since the compiler fixes the order of a block's writes.

use super::interp::{Machine, MachineError, StepRecord};
use super::isa::{Inst, Program};
use alloc::vec;
use alloc::vec::Vec;

/// The blocks a thread may run after block `b`.
pub fn successors(program: &Program, b: usize) -> Vec<usize> {
    let next = (b + 1 < program.blocks.len()).then_some(b + 1);
    match program.blocks[b].last() {
        Some(Inst::Exit) => Vec::new(),
        Some(Inst::Bra { target, c: None, .. }) => vec![*target as usize],
        Some(Inst::Bra { target, .. }) => [*target as usize].into_iter().chain(next).collect(),
        _ => next.into_iter().collect(),
    }
}

/// A register set as a bit mask (the machine has at most 32 registers).
type Regs = u32;

/// Per block: the registers read before any write in it (`uses`) and those it writes (`defs`).
pub(crate) fn uses_defs(program: &Program) -> Vec<(Regs, Regs)> {
    program
        .blocks
        .iter()
        .map(|block| {
            block.iter().fold((0 as Regs, 0 as Regs), |(uses, defs), inst| {
                let fresh = inst.reads().iter().fold(0 as Regs, |m, &r| m | 1 << r) & !defs;
                (uses | fresh, defs | inst.write().map_or(0, |d| 1 << d))
            })
        })
        .collect()
}

/// What each ROM block must send on: its live-out written registers and its stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCarry {
    /// Registers written by the block and live at its exit (bit r = register r).
    pub live_out_writes: u32,
    /// Memory writes (`st`, `atom`) per active lane.
    pub stores: usize,
}

impl BlockCarry {
    /// Words per active lane that later steps read.
    pub fn words(&self) -> usize {
        self.live_out_writes.count_ones() as usize + self.stores
    }

    /// The step's tokens: its record, then two 16-bit value tokens per word and active lane.
    pub fn tokens(&self, mask: u32) -> usize {
        1 + 2 * mask.count_ones() as usize * self.words()
    }
}

/// Every block's [`BlockCarry`], from liveness over the ROM's control flow (a backward dataflow
/// to its fixed point: live-out(b) = ∪ live-in(s) over b's successors, live-in(b) = uses(b) ∪
/// (live-out(b) − defs(b))).
pub fn block_carry(program: &Program) -> Vec<BlockCarry> {
    let n = program.blocks.len();
    let ud = uses_defs(program);
    let succ: Vec<Vec<usize>> = (0..n).map(|b| successors(program, b)).collect();
    let (mut live_in, mut live_out) = (vec![0 as Regs; n], vec![0 as Regs; n]);
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..n).rev() {
            let out = succ[b].iter().fold(0, |m, &s| m | live_in[s]);
            let inn = ud[b].0 | (out & !ud[b].1);
            changed |= out != live_out[b] || inn != live_in[b];
            (live_out[b], live_in[b]) = (out, inn);
        }
    }
    (0..n)
        .map(|b| BlockCarry {
            live_out_writes: ud[b].1 & live_out[b],
            stores: program.blocks[b].iter().filter(|i| i.writes_memory()).count(),
        })
        .collect()
}

/// A run's token count under the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub steps: u64,
    pub tokens: u64,
    /// Steps that carry nothing (one token: branches, barriers, exits, dead writes).
    pub one_token_steps: u64,
}

impl Tally {
    /// The executed steps of a run, against its program's blocks.
    pub fn of(carry: &[BlockCarry], steps: &[StepRecord]) -> Tally {
        steps.iter().fold(Tally::default(), |t, s| {
            let k = carry.get(s.block).map_or(1, |c| c.tokens(s.mask)) as u64;
            Tally { steps: t.steps + 1, tokens: t.tokens + k, one_token_steps: t.one_token_steps + u64::from(k == 1) }
        })
    }

    pub fn per_step(&self) -> f64 {
        self.tokens as f64 / self.steps.max(1) as f64
    }
}

/// A run tallied two ways: every word as two 16-bit value tokens (`fixed`), and each live
/// register word as one token when its value fits a signed 16-bit token (`compact`: most of the
/// suite's values are indices, counts and flags), stores still two. The run's steps are returned
/// too.
pub struct Tallies {
    pub fixed: Tally,
    pub compact: Tally,
    pub steps: Vec<StepRecord>,
}

/// Runs `m` to its end (at most `limit` steps) and tallies every step, reading each live-out
/// register's value after the step.
pub fn run_tallied(m: &mut Machine, carry: &[BlockCarry], limit: u64) -> Result<Tallies, MachineError> {
    let steps = m.run_each(limit, |m, s| {
        let c = carry.get(s.block).copied().unwrap_or(BlockCarry { live_out_writes: 0, stores: 0 });
        let regs = &m.warps[s.warp].regs;
        let lanes = (0..regs.len()).filter(|l| s.mask & 1 << l != 0);
        let narrow = |v: u32| i16::try_from(v as i32).is_ok();
        lanes
            .flat_map(|l| (0..32).filter(move |r| c.live_out_writes & 1 << r != 0).map(move |r| regs[l][r]))
            .map(|v| if narrow(v) { 1 } else { 2 })
            .sum::<usize>()
            + 2 * s.mask.count_ones() as usize * c.stores
    })?;
    let fixed = Tally::of(carry, &steps.iter().map(|(s, _)| *s).collect::<Vec<_>>());
    let compact = steps.iter().fold(Tally::default(), |t, &(_, k)| Tally {
        steps: t.steps + 1,
        tokens: t.tokens + 1 + k as u64,
        one_token_steps: t.one_token_steps + u64::from(k == 0),
    });
    Ok(Tallies { fixed, compact, steps: steps.into_iter().map(|(s, _)| s).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwengpu::interp::Launch;
    use crate::qwengpu::isa::{Alu, MachineSpec, Space, Special, Src};
    use crate::qwengpu::suite;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Liveness by its definition, apart from the dataflow: register r is live at the exit of b
    /// when some path from a successor of b reads r before writing it (a search over the
    /// (block, position) graph).
    fn live_by_search(program: &Program, b: usize, r: u8) -> bool {
        let mut seen = vec![false; program.blocks.len()];
        let mut todo = successors(program, b);
        while let Some(s) = todo.pop() {
            if core::mem::replace(&mut seen[s], true) {
                continue;
            }
            let mut written = false;
            for inst in &program.blocks[s] {
                if inst.reads().contains(&r) {
                    return true;
                }
                if inst.write() == Some(r) {
                    written = true;
                    break;
                }
            }
            if !written {
                todo.extend(successors(program, s));
            }
        }
        false
    }

    /// r1 = tid + 1; r2 = 65536; loop: r2 += r1; r3 = r2 · 2 (dead); r1 −= 1; bra r1 → loop;
    /// store r2; exit. Each lane loops tid + 1 times, so the warp's lanes leave one by one.
    fn countdown() -> Program {
        use Inst::{Bra, Exit, Mov, St, S2R};
        let r = Src::Reg;
        let alu = |op, d, a, b| Inst::Alu { op, d, a, b };
        Program {
            blocks: vec![
                vec![
                    S2R { d: 1, s: Special::Tid },
                    Mov { d: 2, a: Src::Imm(65_536) },
                    Mov { d: 4, a: Src::Imm(9) },
                    alu(Alu::Add, 1, r(1), Src::Imm(1)),
                ],
                vec![
                    alu(Alu::Add, 2, r(2), r(1)),
                    alu(Alu::Mul, 3, r(2), Src::Imm(2)),
                    alu(Alu::Sub, 1, r(1), Src::Imm(1)),
                    Bra { target: 1, c: Some(1), neg: false, join: 2 },
                ],
                vec![St { space: Space::Global, a: Src::Imm(0), off: 0, v: r(2) }, Exit],
            ],
        }
    }

    #[test]
    fn a_loop_carries_its_counter_and_its_stores_and_nothing_dead() {
        let program = countdown();
        let carry = block_carry(&program);
        // Blocks 0 and 1: r1 and r2 go on (r4 is never read, r3 dies); block 2: one store.
        assert_eq!(carry[0], BlockCarry { live_out_writes: 0b110, stores: 0 });
        assert_eq!(carry[1], BlockCarry { live_out_writes: 0b110, stores: 0 });
        assert_eq!(carry[2], BlockCarry { live_out_writes: 0, stores: 1 });
        // Three lanes active: 1 + 2·3·2 tokens for the loop body; a store from one lane, 3.
        assert_eq!(carry[1].tokens(0b111), 13);
        assert_eq!(carry[2].tokens(0b1), 3);

        // Run on one warp of 4 threads: r1 (1 … 4) fits a token, r2 (≥ 65,536) takes two.
        let launch = Launch { grid: 1, block: 4, params: vec![] };
        let mut m = Machine::new(MachineSpec::default(), program, &[], launch).unwrap();
        let t = run_tallied(&mut m, &carry, 1_000).unwrap();
        let lanes: Vec<u64> = t.steps.iter().map(|s| u64::from(s.mask.count_ones())).collect();
        assert_eq!(t.steps.iter().filter(|s| s.block == 1).count(), 4, "{:?}", t.steps);
        let per_step =
            |s: &StepRecord, n: u64, r1: u64, r2: u64| if s.block == 2 { 1 + 2 * n } else { 1 + n * (r1 + r2) };
        let want = |r1, r2| t.steps.iter().zip(&lanes).map(|(s, &n)| per_step(s, n, r1, r2)).sum::<u64>();
        assert_eq!(t.fixed.tokens, want(2, 2));
        assert_eq!(t.compact.tokens, want(1, 2));
        assert_eq!((t.fixed.steps, t.compact.steps), (m.steps, m.steps));
    }

    #[test]
    fn suite_liveness_matches_a_path_search_and_runs_tally_every_step() {
        let spec = MachineSpec::default();
        for k in suite::kernels() {
            let (kernel, _, mut m) = k.machine(k.ptx, &spec).unwrap();
            let carry = block_carry(&kernel.program);
            for (b, c) in carry.iter().enumerate() {
                let defs = uses_defs(&kernel.program)[b].1;
                for r in 0..spec.regs as u8 {
                    let want = defs & 1 << r != 0 && live_by_search(&kernel.program, b, r);
                    assert_eq!(c.live_out_writes & 1 << r != 0, want, "{}: block {b}, r{r}", k.name);
                }
            }
            let Tallies { fixed: t, compact, steps } = run_tallied(&mut m, &carry, 1_000_000).unwrap();
            assert_eq!((t.steps, compact.steps), (m.steps, m.steps), "{}", k.name);
            // A narrow word saves one of its two tokens, no more.
            assert!(
                compact.tokens <= t.tokens && 2 * compact.tokens >= t.tokens + t.steps,
                "{}: {compact:?} {t:?}",
                k.name
            );
            // Every store writes a word the launch reads back: a kernel that stores is never all
            // one-token steps, and no step carries more than every register and store of 4 lanes.
            assert!(t.tokens >= t.steps && t.one_token_steps <= t.steps, "{}: {t:?}", k.name);
            assert!(t.tokens > t.steps, "{}: stores nothing?", k.name);
            let worst = 1 + 2 * spec.lanes * (spec.regs + spec.block_len);
            assert!(steps.iter().all(|s| carry[s.block].tokens(s.mask) <= worst), "{}", k.name);
        }
    }
}
