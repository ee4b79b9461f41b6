//! The interpreter on hand-assembled programs against plain Rust.

use super::interp::*;
use super::isa::*;
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use Src::{Imm, Reg};

fn run(
    blocks: Vec<Vec<Inst>>,
    input: &[u32],
    grid: usize,
    block: usize,
    params: &[u32],
) -> (Vec<u32>, Vec<StepRecord>) {
    run_on(Reconverge::Stack, blocks, input, grid, block, params)
}

fn run_on(
    reconverge: Reconverge,
    blocks: Vec<Vec<Inst>>,
    input: &[u32],
    grid: usize,
    block: usize,
    params: &[u32],
) -> (Vec<u32>, Vec<StepRecord>) {
    let launch = Launch { grid, block, params: params.to_vec() };
    let spec = MachineSpec { reconverge, ..MachineSpec::default() };
    let mut m = Machine::new(spec, Program { blocks }, input, launch).unwrap();
    let steps = m.run(100_000).unwrap();
    (m.global, steps)
}

fn alu(op: Alu, d: u8, a: Src, b: Src) -> Inst {
    Inst::Alu { op, d, a, b }
}

/// `c[i] = a[i] + b[i]` for `i < n`, one thread per element, 10 elements on 3 warps (the last
/// warp's extra lanes skip the body).
#[test]
fn vector_add_with_a_guard() {
    let n = 10u32;
    let a: Vec<u32> = (0..n).map(|i| i * 7 + 1).collect();
    let b: Vec<u32> = (0..n).map(|i| u32::MAX - i).collect();
    let input = [a.clone(), b.clone()].concat();
    // params: a, b, c byte addresses and n.
    let params = [0, 4 * n, 8 * n, n];
    let blocks = vec![
        vec![
            Inst::S2R { d: 0, s: Special::Tid },
            Inst::S2R { d: 1, s: Special::Param(3) },
            Inst::Set { cmp: Cmp::GeU, d: 2, a: Reg(0), b: Reg(1) },
            Inst::Bra { target: 3, c: Some(2), neg: false, join: 3 },
        ],
        vec![
            alu(Alu::Shl, 3, Reg(0), Imm(2)),
            Inst::S2R { d: 4, s: Special::Param(0) },
            alu(Alu::Add, 4, Reg(4), Reg(3)),
            Inst::Ld { space: Space::Global, d: 5, a: Reg(4), off: 0 },
        ],
        vec![
            Inst::Ld { space: Space::Global, d: 6, a: Reg(4), off: 4 * n as i32 },
            alu(Alu::Add, 5, Reg(5), Reg(6)),
            Inst::St { space: Space::Global, a: Reg(4), off: 8 * n as i32, v: Reg(5) },
        ],
        vec![Inst::Exit],
    ];
    // Both rules merge the lanes at the exit: there the join is the lowest PC left.
    for reconverge in [Reconverge::Stack, Reconverge::LowestPc] {
        let (global, steps) = run_on(reconverge, blocks.clone(), &input, 1, 10, &params);
        let want: Vec<u32> = a.iter().zip(&b).map(|(x, y)| x.wrapping_add(*y)).collect();
        assert_eq!(&global[20..30], &want[..]);
        // Warp 2 holds threads 8..12: lanes 2 and 3 branch straight to the exit.
        assert!(steps.iter().any(|s| s.warp == 2 && s.block == 1 && s.mask == 0b0011));
        assert!(steps.iter().any(|s| s.warp == 2 && s.block == 3 && s.mask == 0b1111), "{reconverge:?}: {steps:?}");
    }
}

/// A loop whose trip count differs per lane: lanes reconverge at the loop's exit.
#[test]
fn divergent_loops_reconverge() {
    // out[t] = Σ_{k < t} k for t in 0..8.
    let blocks = vec![
        vec![Inst::S2R { d: 0, s: Special::Tid }, Inst::Mov { d: 1, a: Imm(0) }, Inst::Mov { d: 2, a: Imm(0) }],
        vec![
            Inst::Set { cmp: Cmp::GeU, d: 3, a: Reg(2), b: Reg(0) },
            Inst::Bra { target: 3, c: Some(3), neg: false, join: 3 },
        ],
        vec![
            alu(Alu::Add, 1, Reg(1), Reg(2)),
            alu(Alu::Add, 2, Reg(2), Imm(1)),
            Inst::Bra { target: 1, c: None, neg: false, join: 1 },
        ],
        vec![
            alu(Alu::Shl, 4, Reg(0), Imm(2)),
            Inst::St { space: Space::Global, a: Reg(4), off: 0, v: Reg(1) },
            Inst::Exit,
        ],
    ];
    for reconverge in [Reconverge::Stack, Reconverge::LowestPc] {
        let (global, steps) = run_on(reconverge, blocks.clone(), &[], 1, 8, &[]);
        let want: Vec<u32> = (0..8).map(|t: u32| (0..t).sum()).collect();
        assert_eq!(&global[..8], &want[..]);
        // Each warp stores once, all four lanes together: lanes that left the loop wait at the
        // exit while the others, at lower PCs, go round.
        let stores: Vec<u32> = steps.iter().filter(|s| s.block == 3).map(|s| s.mask).collect();
        assert_eq!(stores, [0b1111, 0b1111], "{reconverge:?}");
    }
}

/// Where the two rules part: a join laid out *before* a path to it (as clang lays out a rotated
/// loop's latch). The stack still merges the lanes at the join; at the lowest PC the lanes that
/// reach the join first run it alone, which is why `layout` puts every join after its paths.
#[test]
fn the_lowest_pc_merges_only_where_the_layout_lets_it() {
    // Block 0 branches to 2 (taken by odd lanes) or falls to 1, which jumps over the join 2 to
    // 3, which jumps back to 2 (the join); 2 stores and exits.
    let blocks = vec![
        vec![
            Inst::S2R { d: 0, s: Special::Tid },
            alu(Alu::And, 1, Reg(0), Imm(1)),
            Inst::Bra { target: 2, c: Some(1), neg: false, join: 2 },
        ],
        vec![Inst::Bra { target: 3, c: None, neg: false, join: 3 }],
        vec![
            alu(Alu::Shl, 2, Reg(0), Imm(2)),
            Inst::St { space: Space::Global, a: Reg(2), off: 0, v: Reg(0) },
            Inst::Exit,
        ],
        vec![Inst::Bra { target: 2, c: None, neg: false, join: 2 }],
    ];
    let joined = |reconverge| {
        let (global, steps) = run_on(reconverge, blocks.clone(), &[], 1, 4, &[]);
        assert_eq!(&global[..4], &[0, 1, 2, 3], "{reconverge:?}");
        steps.iter().filter(|s| s.block == 2).map(|s| s.mask).collect::<Vec<_>>()
    };
    assert_eq!(joined(Reconverge::Stack), [0b1111]);
    assert_eq!(joined(Reconverge::LowestPc), [0b1010, 0b0101]);
}

/// Shared memory and a barrier: each thread writes its id, the block waits, then each reads its
/// neighbour's (across warps); and warp shuffles within a warp.
#[test]
fn barriers_order_shared_memory_and_shuffles_cross_lanes() {
    let blocks = vec![
        vec![
            Inst::S2R { d: 0, s: Special::Tid },
            alu(Alu::Shl, 1, Reg(0), Imm(2)),
            Inst::St { space: Space::Shared, a: Reg(1), off: 0, v: Reg(0) },
            Inst::Bar,
        ],
        vec![
            alu(Alu::Add, 2, Reg(1), Imm(4)),
            alu(Alu::And, 2, Reg(2), Imm(31)), // (t + 1) mod 8, in bytes
            Inst::Ld { space: Space::Shared, d: 3, a: Reg(2), off: 0 },
            Inst::Shfl { mode: Shfl::Bfly, d: 4, a: 0, b: Imm(1) },
        ],
        vec![
            Inst::St { space: Space::Global, a: Reg(1), off: 0, v: Reg(3) },
            Inst::St { space: Space::Global, a: Reg(1), off: 32, v: Reg(4) },
            Inst::Exit,
        ],
    ];
    let (global, _) = run(blocks, &[], 1, 8, &[]);
    assert_eq!(&global[..8], &[1, 2, 3, 4, 5, 6, 7, 0]);
    assert_eq!(&global[8..16], &[1, 0, 3, 2, 5, 4, 7, 6]);
}

/// Atomics from every lane of several blocks, and memory that never faults.
#[test]
fn atomics_count_and_addresses_wrap() {
    let blocks = vec![
        vec![
            Inst::AtomAdd { space: Space::Global, d: 0, a: Imm(0), off: 0, v: Imm(1) },
            Inst::S2R { d: 1, s: Special::Ctaid },
            // Word 126 + 1 + ctaid wraps to 1 + ctaid.
            alu(Alu::Add, 1, Reg(1), Imm(127)),
            alu(Alu::Shl, 1, Reg(1), Imm(2)),
        ],
        vec![Inst::AtomAdd { space: Space::Global, d: 2, a: Reg(1), off: 0, v: Reg(0) }, Inst::Exit],
    ];
    let (global, _) = run(blocks, &[], 3, 8, &[]);
    assert_eq!(global[0], 24);
    // Block c's threads saw counter values 8c..8c+8 and summed them at word 1 + c.
    for c in 0..3u32 {
        assert_eq!(global[1 + c as usize], (8 * c..8 * c + 8).sum::<u32>());
    }
}

#[test]
fn the_alu_follows_its_definitions() {
    assert_eq!(Alu::DivS.eval(7u32.wrapping_neg(), 2), 3u32.wrapping_neg()); // toward zero
    assert_eq!(Alu::RemS.eval(7u32.wrapping_neg(), 2), 1u32.wrapping_neg());
    assert_eq!(Alu::DivU.eval(5, 0), u32::MAX);
    assert_eq!(Alu::RemU.eval(5, 0), 5);
    assert_eq!(Alu::DivS.eval(i32::MIN as u32, u32::MAX), i32::MIN as u32);
    assert_eq!(Alu::Shl.eval(1, 32), 0);
    assert_eq!(Alu::Sra.eval(0x8000_0000, 40), u32::MAX);
    assert_eq!(Alu::MulHiS.eval(u32::MAX, u32::MAX), 0); // (−1)·(−1) = 1
    assert_eq!(Alu::MulHiU.eval(u32::MAX, u32::MAX), u32::MAX - 1);
    assert_eq!(Cmp::LtS.eval(u32::MAX, 0), 1);
    assert_eq!(Cmp::LtU.eval(u32::MAX, 0), 0);
}

#[test]
fn programs_and_launches_beyond_the_machine_are_refused() {
    let spec = MachineSpec::default();
    let exit = || vec![Inst::Exit];
    let launch = |grid, block| Launch { grid, block, params: vec![] };
    let err =
        |blocks: Vec<Vec<Inst>>, l: Launch| Machine::new(spec, Program { blocks }, &[], l).unwrap_err().to_string();
    assert!(err(vec![exit(); 33], launch(1, 4)).contains("the ROM holds 1 to 32"));
    assert!(err(vec![vec![Inst::Mov { d: 0, a: Imm(0) }; 5]], launch(1, 4)).contains("blocks hold 1 to 4"));
    assert!(err(vec![vec![Inst::Mov { d: 15, a: Imm(0) }, Inst::Exit]], launch(1, 4)).contains("r0..r14"));
    assert!(err(vec![vec![Inst::Exit, Inst::Exit]], launch(1, 4)).contains("before the block's end"));
    assert!(err(vec![exit()], launch(1, 33)).contains("at most 32 threads"));
    assert!(err(vec![exit()], launch(5, 32)).contains("at most 128 threads"));
    let big = Machine::new(spec, Program { blocks: vec![exit()] }, &[0; 127], launch(1, 4));
    assert!(matches!(big, Err(MachineError::Memory { words: 127, capacity: 126 })));
    // An endless loop stops at the step limit.
    let spin = vec![vec![Inst::Bra { target: 0, c: None, neg: false, join: 0 }]];
    let mut m = Machine::new(spec, Program { blocks: spin }, &[], launch(1, 4)).unwrap();
    assert_eq!(m.run(50).unwrap_err(), MachineError::StepLimit(50));
}
