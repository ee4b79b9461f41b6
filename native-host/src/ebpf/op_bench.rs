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
    super::require_kernel().context("nothing to measure")?;
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

#[derive(clap::Args)]
pub struct ModelArgs {
    /// Model shape with deterministic random weights: qwen3-0.6b or tiny.
    #[arg(long, default_value = "qwen3-0.6b")]
    shape: String,
    /// Tokens to generate (greedy, each fed back).
    #[arg(short = 'n', default_value_t = 8)]
    tokens: usize,
    /// Threads sharing each matrix (parallel BPF calls on disjoint rows).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Matrix storage in the kernel: q24, bf16-table or int4-g128 (see `ebpf run --help`).
    #[arg(long, default_value = "q24", value_parser = super::cli::parse_weights)]
    weights: kernels_wasm::qwen3::weights::WeightFormat,
}

/// `native-host ebpf bench`: a generated model of the requested shape, greedy decoding with every
/// operator in the kernel, against the golden model in userspace on the same tokens.
pub fn run_model(args: ModelArgs) -> Result<()> {
    use super::forward::BpfModel;
    use kernels_wasm::qwen3::model::{Cache, Config, Model};
    let config = Config::named(&args.shape)
        .ok_or_else(|| anyhow::anyhow!("--shape {:?}: give tiny or qwen3-0.6b", args.shape))?;
    super::require_kernel().context("nothing to measure")?;
    let n = args.tokens.clamp(1, 4096);
    let t = Instant::now();
    eprintln!("generating {} random weights ({:?})…", args.shape, config);
    let base = Model::from_float(config, &Model::random_float(config, 1))?;
    // The golden model of the storage the kernel uses (the identity for q24).
    let model = base.with_weights(args.weights);
    eprintln!("  {:.1} s; loading programs and copying weights into BPF maps…", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let mut bpf = BpfModel::load_as(&base, n, args.threads, args.weights)?;
    eprintln!("  {:.1} s", t.elapsed().as_secs_f64());
    for (program, insns) in bpf.ops.verifier_stats() {
        println!("verifier: {program:<18} {} instructions", insns.map(|n| n.to_string()).unwrap_or_else(|| "?".into()));
    }
    let (mut token, mut cache) = (1usize, Cache::default());
    let mut fed = Vec::new();
    let (mut kernel_time, mut golden_time) = (Duration::ZERO, Duration::ZERO);
    println!("{:>4} {:>7} {:>10} {:>12} {:>10}", "pos", "token", "s/token", "golden s", "bpf calls");
    for pos in 0..n {
        let calls = bpf.calls();
        let t = Instant::now();
        let step = bpf.forward(token, pos)?;
        let kt = t.elapsed();
        fed.push(token);
        let t = Instant::now();
        let golden = model.forward(token, pos, &mut cache);
        let gt = t.elapsed();
        if golden.logits != step.logits {
            bail!("position {pos}: the kernel's logits differ from the golden model's");
        }
        println!(
            "{pos:>4} {:>7} {:>10.3} {:>12.3} {:>10}",
            step.argmax,
            kt.as_secs_f64(),
            gt.as_secs_f64(),
            bpf.calls() - calls
        );
        kernel_time += kt;
        golden_time += gt;
        token = step.argmax;
    }
    let calls_per_token = bpf.calls() / n as u64;
    // The same tokens again with every BPF call traced (positions are rewritten in order, so the
    // cache is valid): what the bridge's trace events cost.
    // Per operator: (calls, kernel-measured ns, wall ns), over every traced token. Tracing's
    // cost, paired: each position is run again untraced then traced (rewriting a position with
    // the same token is idempotent), three times, and the median ratio is reported; separate
    // whole runs would measure this shared machine's noise instead.
    let mut per_op: Vec<(String, u64, u64, u64)> = Vec::new();
    let mut ratios = Vec::new();
    for (pos, &tok) in fed.iter().enumerate() {
        for round in 0..3 {
            bpf.trace = None;
            let t = Instant::now();
            bpf.forward(tok, pos)?;
            let untraced = t.elapsed();
            bpf.trace = Some(Vec::new());
            let t = Instant::now();
            bpf.forward(tok, pos)?;
            ratios.push(t.elapsed().as_secs_f64() / untraced.as_secs_f64());
            if round > 0 {
                continue;
            }
            for span in bpf.trace.iter().flatten() {
                let wall = span.end_ns.saturating_sub(span.start_ns);
                match per_op.iter_mut().find(|o| o.0 == span.op) {
                    Some(o) => (o.1, o.2, o.3) = (o.1 + 1, o.2 + span.kernel_ns, o.3 + wall),
                    None => per_op.push((span.op.clone(), 1, span.kernel_ns, wall)),
                }
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let traced_ratio = ratios[ratios.len() / 2];
    per_op.sort_by_key(|o| std::cmp::Reverse(o.3));
    println!(
        "{:<28} {:>10} {:>14} {:>14} {:>8}",
        "operator (traced run)", "calls/tok", "kernel ms/tok", "wall ms/tok", "share"
    );
    let total_wall: u64 = per_op.iter().map(|o| o.3).sum();
    for (op, calls, kernel, wall) in &per_op {
        println!(
            "{op:<28} {:>10} {:>14.2} {:>14.2} {:>7.1}%",
            calls / n as u64,
            *kernel as f64 / 1e6 / n as f64,
            *wall as f64 / 1e6 / n as f64,
            *wall as f64 * 100.0 / total_wall.max(1) as f64
        );
    }
    println!(
        "tracing every BPF call: {:+.1} % (median of {} paired traced/untraced reruns of a position)",
        (traced_ratio - 1.0) * 100.0,
        ratios.len()
    );
    println!(
        "mean: {:.3} s/token in the kernel ({} threads, weights {}), {:.3} s/token golden model in userspace (1 thread), {} bpf calls/token; logits identical at every step",
        kernel_time.as_secs_f64() / n as f64,
        bpf.threads,
        args.weights.name(),
        golden_time.as_secs_f64() / n as f64,
        calls_per_token
    );
    Ok(())
}
