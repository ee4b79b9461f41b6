//! `native-host qwengpu bench`: the suite's kernels on the compiled layers, one thread, as a
//! table of machine steps per second (a step is one warp running one ROM block). Each kernel
//! first runs once in lockstep with the interpreter (checked after every step), then is timed
//! without the check.

use anyhow::{bail, Context, Result};
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::control::CTRL;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::run::{ByKind, Runner};
use kernels_wasm::qwengpu::suite::kernels;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Kernels to run, comma-separated (default: the whole suite).
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Timed runs per kernel (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
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
    let spec = MachineSpec::default();
    let suite = kernels();
    if let Some(bad) = args.kernels.iter().find(|n| !suite.iter().any(|k| k.name == n.as_str())) {
        let names: Vec<&str> = suite.iter().map(|k| k.name).collect();
        bail!("no kernel {bad:?} in the suite ({})", names.join(", "));
    }
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
    for k in suite.iter().filter(|k| args.kernels.is_empty() || args.kernels.iter().any(|n| n == k.name)) {
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
        for _ in 0..args.reps {
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
