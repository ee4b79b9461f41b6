//! `native-host qwengpu run FILE.cu|FILE.ptx --grid G --block B --arg …`: any kernel, not only
//! the suite's, on the compiled layers, in lockstep with the interpreter after every step. The
//! arrays come back through VAL tokens and are printed in parameter order.

use super::read_ptx;
use anyhow::{Context, Result};
use kernels_wasm::qwengpu::args::{layout, parse, Arg};
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::interp::Machine;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::lower::compile as lower;
use kernels_wasm::qwengpu::run::Runner;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A CUDA C file (.cu, compiled with clang-19) or PTX (.ptx).
    pub file: PathBuf,
    /// Thread blocks.
    #[arg(long, default_value_t = 1)]
    pub grid: usize,
    /// Threads per block.
    #[arg(long)]
    pub block: usize,
    /// One per kernel parameter, in order: an array `[v1,v2,…]` (u32 or negative i32 words),
    /// `zeros:N`, or a scalar. Write `--arg=-5` (or `--arg=[-1,2]`) for a leading minus.
    #[arg(long = "arg", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// The entry to take when the file has several kernels.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Stop after this many machine steps (an endless loop is reported, not waited on).
    #[arg(long, default_value_t = 1_000_000)]
    pub max_steps: u64,
    /// Print `{"arrays": [[…], …], "steps": N, "tokens": N}` only.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let spec = MachineSpec::default();
    let ptx = read_ptx(&a.file)?;
    let kernel = lower(&ptx, a.kernel.as_deref(), &spec).with_context(|| format!("lowering {}", a.file.display()))?;
    let args: Vec<Arg> = a.args.iter().enumerate().map(|(i, t)| parse(i + 1, t)).collect::<Result<_, _>>()?;
    let l = layout(&kernel, &args, a.grid, a.block, &spec)?;
    // The launch is checked here, before the layers are built (seconds), not after.
    Machine::new(spec, kernel.program.clone(), &l.memory, l.launch.clone())?;
    if !a.json {
        eprintln!(
            "{}: {} ROM blocks, grid {} × block {}; compiling the machine into layers …",
            kernel.name,
            kernel.program.blocks.len(),
            a.grid,
            a.block
        );
    }
    let mut runner = Runner::new(Compiled::new(spec).context("compiling the machine")?);
    runner.lockstep = true;
    let report = runner
        .launch(&kernel.program, &l.memory, &l.launch, a.max_steps)
        .with_context(|| format!("running {} on the compiled layers", kernel.name))?;
    let arrays = l.read_arrays(&report.global);
    if a.json {
        println!("{}", serde_json::json!({ "arrays": arrays, "steps": report.steps, "tokens": report.tokens }));
        return Ok(());
    }
    // PTX names parameters after the mangled function (`_Z3addPjj_param_0`): number them instead.
    let positions = args.iter().enumerate().filter(|(_, a)| matches!(a, Arg::Array(_))).map(|(i, _)| i + 1);
    for (i, values) in positions.zip(&arrays) {
        let words: Vec<String> = values.iter().map(u32::to_string).collect();
        println!("arg {i} = [{}]", words.join(", "));
    }
    println!("{} machine steps, {} tokens (every step identical to the interpreter's)", report.steps, report.tokens);
    Ok(())
}
