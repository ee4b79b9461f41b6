//! `native-host qwengpu bench`: the suite's kernels on the compiled layers, one thread, as a
//! table of machine steps per second (a step is one warp running one ROM block), for the first
//! design and the second side by side. On the first, each kernel first runs once in lockstep with
//! the interpreter (checked after every step), then is timed without the check. The second runs
//! spliced into the tiny random llama (its text layers are a small share of a position), and
//! every run is checked: after the prompt the model's argmax picks every record and VAL token,
//! and a token that is not the interpreter's stops the launch (`splice::launch`).

use anyhow::{bail, Context, Result};
use kernels_wasm::gpu::launch::launch as gpu_launch;
use kernels_wasm::gpu::machine::GpuMachine;
use kernels_wasm::gpu::{block_on, Gpu};
use kernels_wasm::qwen3::model::Model;
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::control::CTRL;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::isa::Program;
use kernels_wasm::qwengpu::run::{ByKind, Runner};
use kernels_wasm::qwengpu::splice::launch::launch;
use kernels_wasm::qwengpu::splice::launch::Launched;
use kernels_wasm::qwengpu::splice::{Runner as SplicedRunner, Splice, TINY_TEXT};
use kernels_wasm::qwengpu::suite::{kernels, Prepared, SuiteKernel};
use std::ops::ControlFlow;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Kernels to run, comma-separated (default: the whole suite).
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Timed runs per kernel (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Which design to time.
    #[arg(long, value_enum, default_value_t = Design::Both)]
    design: Design,
    /// Also time the second machine on WebGPU (wgpu: Vulkan here, Mesa lavapipe without a GPU),
    /// in the same run.
    #[arg(long)]
    gpu: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Design {
    First,
    Second,
    Both,
}

fn seconds() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: Args) -> Result<()> {
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let suite = kernels();
    if let Some(bad) = args.kernels.iter().find(|n| !suite.iter().any(|k| k.name == n.as_str())) {
        let names: Vec<&str> = suite.iter().map(|k| k.name).collect();
        bail!("no kernel {bad:?} in the suite ({})", names.join(", "));
    }
    let chosen: Vec<&SuiteKernel> =
        suite.iter().filter(|k| args.kernels.is_empty() || args.kernels.iter().any(|n| n == k.name)).collect();
    if args.design != Design::Second {
        first(&chosen, args.reps)?;
    }
    if args.design != Design::First {
        second(&chosen, args.reps)?;
    }
    if args.gpu {
        second_on_gpu(&chosen, args.reps)?;
    }
    Ok(())
}

/// The second machine spliced into the tiny random llama: each kernel's launch (prompt, records,
/// the VAL tokens the model picks) timed whole, in a fresh context each run.
fn second(chosen: &[&SuiteKernel], reps: usize) -> Result<()> {
    let c = TINY_TEXT;
    let model = Model::random_float(c, 3);
    eprintln!("splicing the second machine into the tiny random llama …");
    let splice = Splice::new(c)?;
    println!("\nsecond machine, in the tiny random llama (text layers {} of hidden {}):", c.layers, c.hidden);
    println!("{}", splice.sizes());
    table(chosen, reps, |k, program, p| {
        let mut runner = SplicedRunner::spliced(c, &model, &splice)?;
        let t = Instant::now();
        let go = |_| ControlFlow::Continue(());
        let launched = launch(&mut runner, &splice, program, &p.memory, &p.launch, 1_000_000, go)
            .with_context(|| k.name.to_string())?;
        Ok((launched, t.elapsed().as_secs_f64()))
    })?;
    println!(
        "(whole launches: the prompt, fed 64 positions at a time, then each record and VAL token the model \
         chooses, one position at a time)"
    );
    Ok(())
}

/// The second machine on WebGPU: each kernel's launch timed whole on a machine uploaded afresh
/// (the upload not timed), every chosen token checked against the interpreter's as it comes back.
fn second_on_gpu(chosen: &[&SuiteKernel], reps: usize) -> Result<()> {
    let model = Model::random_float(TINY_TEXT, 3);
    let splice = Splice::new(TINY_TEXT)?;
    let norms = splice.norms(&model);
    let gpu = block_on(Gpu::new()).context("opening a WebGPU adapter")?;
    println!("\nsecond machine on WebGPU, {} (one submission a token, the argmax on the GPU):", gpu.adapter);
    table(chosen, reps, |k, program, p| {
        let mut machine = GpuMachine::new(&gpu, &splice, &norms, 1 << 20)?;
        let t = Instant::now();
        let launched =
            block_on(gpu_launch((&gpu, &mut machine), &splice, program, &p.memory, &p.launch, 1_000_000, |_| {}))
                .with_context(|| k.name.to_string())?;
        Ok((launched, t.elapsed().as_secs_f64()))
    })?;
    if gpu.adapter.software {
        println!("({} is a CPU emulation: these times are for regressions only)", gpu.adapter.name);
    }
    Ok(())
}

/// The second machine's table: each kernel launched `reps` times by `run` (which returns the
/// launch and its seconds), its arrays checked, the median's row, then the totals.
fn table(
    chosen: &[&SuiteKernel],
    reps: usize,
    mut run: impl FnMut(&SuiteKernel, (MachineSpec, &Program), &Prepared) -> Result<(Launched, f64)>,
) -> Result<()> {
    let spec = MachineSpec::second();
    println!(
        "{:<18} {:>6} {:>7} {:>7} {:>9} {:>9} {:>10}  checked",
        "kernel", "steps", "tokens", "chosen", "ms", "steps/s", "tokens/s"
    );
    let (mut steps, mut tokens, mut secs) = (0u64, 0u64, 0f64);
    for k in chosen {
        let (kernel, p, _) = k.machine(k.ptx, &spec).map_err(anyhow::Error::msg)?;
        let (mut times, mut out) = (Vec::new(), None);
        for _ in 0..reps {
            let (launched, took) = run(k, (spec, &kernel.program), &p)?;
            times.push(took);
            if p.read_arrays(&launched.global) != k.expected(&p) {
                bail!("{}: the arrays differ from the plain Rust version", k.name);
            }
            out = Some(launched);
        }
        let (Some(out), m) = (out, median(times)) else { continue };
        let (s, t) = (out.steps as f64 / m, out.tokens as f64 / m);
        println!(
            "{:<18} {:>6} {:>7} {:>7} {:>9.1} {:>9.1} {:>10.0}  every chosen token the interpreter's",
            k.name,
            out.steps,
            out.tokens,
            out.chosen,
            m * 1e3,
            s,
            t
        );
        (steps, tokens, secs) = (steps + out.steps, tokens + out.tokens, secs + m);
    }
    let (s, t) = (steps as f64 / secs, tokens as f64 / secs);
    println!("{:<18} {:>6} {:>7} {:>7} {:>9.1} {:>9.1} {:>10.0}", "all", steps, tokens, "", secs * 1e3, s, t);
    Ok(())
}

/// The first design: 117 layers, the host copying each token's output record.
fn first(chosen: &[&SuiteKernel], reps: usize) -> Result<()> {
    let spec = MachineSpec::default();
    eprintln!("compiling the machine into layers …");
    let t = Instant::now();
    let compiled = Compiled::new(spec).context("compiling the machine")?;
    let built = t.elapsed().as_secs_f64();
    let s = compiled.summary();
    println!(
        "compiled machine: {} decoder layers ({} Gated DeltaNet heads, {} SwiGLU MLPs, {} hidden units), d_model {}",
        s.decoder_layers, s.deltanet_heads, s.mlp_sublayers, s.hidden_units, s.d_model
    );
    println!(
        "  parameters {:.3e} as dense matrices, {} nonzero; state {} floats ({:.1} MiB); built in {built:.2} s",
        s.parameters as f64,
        s.nonzero,
        s.state_floats,
        s.state_floats as f64 * 4.0 / (1 << 20) as f64
    );
    let mut runner = Runner::new(compiled);
    runner.clock = Some(seconds);
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>9} {:>10} {:>13}  lockstep",
        "kernel", "steps", "tokens", "ms", "steps/s", "tokens/s", "exec steps/s"
    );
    let (mut steps, mut tokens, mut secs, mut exec) = (0u64, 0u64, 0f64, 0f64);
    // Every timed run's execution phase, by token kind.
    let mut kinds = ByKind::default();
    for k in chosen {
        let (kernel, p, _) = k.machine(k.ptx, &spec).map_err(anyhow::Error::msg)?;
        runner.lockstep = true;
        let checked =
            runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000).with_context(|| k.name.to_string())?;
        if p.read_arrays(&checked.global) != k.expected(&p) {
            bail!("{}: the arrays differ from the plain Rust version", k.name);
        }
        runner.lockstep = false;
        let (mut times, mut exec_times) = (Vec::new(), Vec::new());
        let mut report = checked.clone();
        for _ in 0..reps {
            let t = Instant::now();
            report = runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000)?;
            times.push(t.elapsed().as_secs_f64());
            exec_times.push(report.exec_seconds.unwrap_or(f64::NAN));
            if let Some(b) = &report.by_kind {
                kinds.add(b);
            }
        }
        let (m, e) = (median(times), median(exec_times));
        println!(
            "{:<18} {:>6} {:>7} {:>9.1} {:>9.0} {:>10.0} {:>13.0}  bit-exact",
            k.name,
            report.steps,
            report.tokens,
            m * 1e3,
            report.steps as f64 / m,
            report.tokens as f64 / m,
            report.steps as f64 / e
        );
        (steps, tokens, secs, exec) = (steps + report.steps, tokens + report.tokens, secs + m, exec + e);
    }
    println!(
        "{:<18} {:>6} {:>7} {:>9.1} {:>9.0} {:>10.0} {:>13.0}",
        "all",
        steps,
        tokens,
        secs * 1e3,
        steps as f64 / secs,
        tokens as f64 / secs,
        steps as f64 / exec
    );
    println!(
        "(ms, steps/s, tokens/s: whole launches — program image, inputs, special registers and control rows, \
         execution, VAL read-back; exec steps/s: from the first FETCH to DONE)"
    );
    let per: Vec<String> = ["EXEC", "CTRL", "FETCH"]
        .iter()
        .enumerate()
        .filter(|&(k, _)| kinds.tokens[k] > 0)
        .map(|(k, name)| {
            let (n, t) = (kinds.tokens[k], kinds.seconds[k]);
            // One CTRL token per step.
            let steps = kinds.tokens[CTRL].max(1);
            format!("{name} {:.1} µs × {:.1} per step", t / n as f64 * 1e6, n as f64 / steps as f64)
        })
        .collect();
    if !per.is_empty() {
        println!("execution phase, time per token by kind: {}", per.join(", "));
    }
    Ok(())
}
