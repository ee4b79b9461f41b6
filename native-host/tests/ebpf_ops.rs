//! The BPF operators, run in this machine's kernel, against the golden model
//! (`kernels_wasm::qwen3::fixed`): bit-identical outputs. Skipped, loudly, only where the
//! capability probe (itself checked against /proc by the probe tests) says bpf() is refused.

use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::qwen3::fixed;
use native_host::ebpf::matvec::Matvec;

fn bpf_available() -> bool {
    let probe = native_host::probe::ebpf();
    if !probe.available {
        eprintln!("SKIPPED: this host cannot load BPF programs: {}", probe.detail);
    }
    probe.available
}

/// Q16 activations in ±8 and Q24 weights in ±0.5: the ranges a real layer sees.
fn data(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<i32>, Vec<i32>) {
    let x = (0..cols).map(|_| (rng.next_u64() % (16 << 16)) as i32 - (8 << 16)).collect();
    let w = (0..rows * cols).map(|_| (rng.next_u64() % (1 << 24)) as i32 - (1 << 23)).collect();
    (x, w)
}

#[test]
fn matvec_in_the_kernel_equals_the_golden_model() {
    if !bpf_available() {
        return;
    }
    let mut rng = Rng::new(5);
    for (rows, cols) in [(1, 2), (7, 64), (300, 1024), (1024, 3072)] {
        let mut prog = Matvec::load(rows, cols).unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
        assert!(prog.verified_insns.is_some_and(|n| n > 0), "verifier statistics");
        let (x, w) = data(&mut rng, rows, cols);
        prog.set_weights(&w).unwrap();
        let mut expected = vec![0; rows];
        let argmax = fixed::matvec(&w, &x, &mut expected);
        for threads in [1, 2] {
            let mut y = vec![0; rows];
            let stats = prog.run(&x, &mut y, threads).unwrap();
            assert_eq!(y, expected, "{rows}x{cols} on {threads} threads");
            assert_eq!(stats.argmax, argmax, "{rows}x{cols} argmax");
            assert_eq!(stats.calls, threads.min(rows));
        }
    }
}

#[test]
fn ties_keep_the_lowest_row_across_threads() {
    if !bpf_available() {
        return;
    }
    let (rows, cols) = (10, 4);
    let mut prog = Matvec::load(rows, cols).unwrap();
    // Rows 3 and 7 tie for the maximum; 7 is in the second thread's share.
    let mut w = vec![0; rows * cols];
    for r in [3, 7] {
        w[r * cols] = 1 << 24;
    }
    prog.set_weights(&w).unwrap();
    let mut y = vec![0; rows];
    let stats = prog.run(&[5 << 16, 0, 0, 0], &mut y, 2).unwrap();
    assert_eq!((stats.argmax, y[3], y[7]), (3, 5 << 16, 5 << 16));
}

#[test]
fn bad_shapes_are_refused_with_their_names() {
    assert!(Matvec::load(4, 3).is_err()); // odd cols
    if !bpf_available() {
        return;
    }
    let mut prog = Matvec::load(4, 8).unwrap();
    assert!(prog.set_weights(&[0; 31]).unwrap_err().to_string().contains("weights"));
    let err = prog.run(&[0; 7], &mut [0; 4], 1).unwrap_err();
    assert!(err.to_string().contains("x: expected 8"), "{err}");
}
