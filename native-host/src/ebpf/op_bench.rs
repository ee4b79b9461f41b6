//! `native-host ebpf op-bench`: each operator on the Qwen3-0.6B shapes in the kernel, with the
//! verifier's instruction count, BPF calls, kernel-measured and wall time, beside the golden
//! model in userspace on the same data (bit-identical outputs are checked, not assumed).

use super::matvec::Matvec;
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::qwen3::fixed;
use std::time::{Duration, Instant};

/// (name, rows, cols) of Qwen3-0.6B's projections: fused q|k|v and gate|up share their input, so
/// each pair or triple is one matrix and one call per thread.
pub const SHAPES: &[(&str, usize, usize)] = &[
    ("q|k|v (2048+1024+1024)x1024", 4096, 1024),
    ("o 1024x2048", 1024, 2048),
    ("gate|up (3072+3072)x1024", 6144, 1024),
    ("down 1024x3072", 1024, 3072),
    ("vocab 151936x1024 + argmax", 151_936, 1024),
];

#[derive(clap::Args)]
pub struct Args {
    /// Timed runs per case (the median is reported).
    #[arg(long, default_value_t = 9)]
    iters: usize,
    /// Skip the 151936-row vocabulary projection (622 MB of map memory).
    #[arg(long)]
    no_vocab: bool,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn run(args: Args) -> Result<()> {
    let probe = crate::probe::ebpf();
    if !probe.available {
        bail!("this host cannot load BPF programs ({}); nothing to measure", probe.detail);
    }
    let iters = args.iters.max(1);
    println!("qwen3_matvec on Qwen3-0.6B shapes; median of {iters}; wall includes the syscalls and thread start");
    println!(
        "{:<30} {:>9} {:>5} {:>11} {:>11} {:>12} {:>10}",
        "operator", "verifier", "calls", "kernel ms", "wall ms", "golden ms", "×golden"
    );
    let mut rng = Rng::new(7);
    for &(name, rows, cols) in SHAPES.iter().filter(|s| !(args.no_vocab && s.1 > 100_000)) {
        let w: Vec<i32> = (0..rows * cols).map(|_| (rng.next_u64() % (1 << 24)) as i32 - (1 << 23)).collect();
        let x: Vec<i32> = (0..cols).map(|_| (rng.next_u64() % (16 << 16)) as i32 - (8 << 16)).collect();
        let mut prog = Matvec::load(rows, cols).with_context(|| format!("loading {name}"))?;
        prog.set_weights(&w)?;
        let mut expected = vec![0; rows];
        let golden = median(
            (0..iters)
                .map(|_| {
                    let t = Instant::now();
                    fixed::matvec(&w, &x, &mut expected);
                    t.elapsed()
                })
                .collect(),
        );
        for threads in [1, 2] {
            let mut y = vec![0; rows];
            let mut walls = Vec::new();
            let mut kernel = Vec::new();
            let mut calls = 0;
            for _ in 0..iters {
                let t = Instant::now();
                let stats = prog.run(&x, &mut y, threads)?;
                walls.push(t.elapsed());
                kernel.push(Duration::from_nanos(stats.kernel_ns / stats.calls.max(1) as u64));
                calls = stats.calls;
            }
            if y != expected {
                bail!("{name}: the kernel's output differs from the golden model");
            }
            let (wall, kern) = (median(walls), median(kernel));
            println!(
                "{:<30} {:>9} {:>5} {:>11.2} {:>11.2} {:>12.2} {:>10.2}",
                format!("{name} x{threads}"),
                prog.verified_insns.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
                calls,
                kern.as_secs_f64() * 1e3,
                wall.as_secs_f64() * 1e3,
                golden.as_secs_f64() * 1e3,
                golden.as_secs_f64() / wall.as_secs_f64(),
            );
        }
    }
    Ok(())
}
