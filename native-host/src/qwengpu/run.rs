//! `native-host qwengpu run FILE.cu|FILE.ptx --grid G --block B --arg …`: any kernel, not only
//! the suite's, on the compiled layers, in lockstep with the interpreter after every step. The
//! arrays come back through VAL tokens and are printed in parameter order.
//!
//! By default the kernel runs on the second machine inside the spliced language model
//! (`kernels_wasm::qwengpu::splice::launch`): -m's text model (default the SmolLM2 file `cargo
//! xtask setup` fetches) spliced here, or a checkpoint `qwengpu splice -o DIR` wrote (`--load
//! DIR`). After the host's prompt the model's argmax picks every record and VAL token, and the
//! arrays are read from the store tokens it picked. `--design first` runs the first design's
//! compiled layers instead (about 150 times faster, no text model).

use super::read_ptx;
use super::{checkpoint, drift::model_path};
use crate::ebpf::models;
use crate::ebpf::tokenize::TextTokenizer;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kernels_wasm::gpu::launch::launch as gpu_launch;
use kernels_wasm::gpu::machine::GpuMachine;
use kernels_wasm::gpu::{block_on, Gpu};
use kernels_wasm::qwen3::model::{Config, FloatModel};
use kernels_wasm::qwengpu::args::{layout, parse, Arg, Layout};
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::interp::Machine;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::lower::compile as lower;
use kernels_wasm::qwengpu::lower::Kernel;
use kernels_wasm::qwengpu::run::Runner;
use kernels_wasm::qwengpu::splice::launch::{launch, Fed};
use kernels_wasm::qwengpu::splice::StreamNorms;
use kernels_wasm::qwengpu::splice::{Runner as SplicedRunner, Splice};
use std::path::{Path, PathBuf};

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
    /// Which machine runs it: the second, inside a spliced language model (the default), or the
    /// first design's compiled layers alone.
    #[arg(long, value_enum, default_value_t = Design::Second)]
    pub design: Design,
    /// Run inside a spliced checkpoint (`qwengpu splice -o DIR`) instead of splicing -m's model.
    #[arg(long, conflicts_with = "model")]
    pub load: Option<PathBuf>,
    /// The second design was opt-in before it became the default; still accepted.
    #[arg(long, hide = true)]
    pub spliced: bool,
    /// The text model to splice the second machine into (GGUF or a Hugging Face directory;
    /// default: the SmolLM2 file `cargo xtask setup` fetches).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Run the spliced model's machine positions on WebGPU (wgpu: Vulkan here, Mesa lavapipe
    /// without a GPU): one submission a token, the next token chosen on the GPU.
    #[arg(long)]
    pub gpu: bool,
}

/// The machine `qwengpu run` launches a kernel on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Design {
    /// The first design's compiled layers (117 layers on a 97,039-channel stream), no text model.
    First,
    /// The second machine inside a spliced language model, every record chosen by its argmax.
    Second,
}

pub fn run(a: Args) -> Result<()> {
    let inside = a.design == Design::Second;
    let second_only =
        [("--spliced", a.spliced), ("--load", a.load.is_some()), ("-m", a.model.is_some()), ("--gpu", a.gpu)];
    if let Some((flag, _)) = second_only.iter().find(|(_, set)| *set && !inside) {
        bail!("{flag} is for the second design (inside a spliced model), not --design first");
    }
    // The spliced model holds the second machine: no divider, lanes in turn, a 64-block ROM.
    let spec = if inside { MachineSpec::second() } else { MachineSpec::default() };
    let ptx = read_ptx(&a.file)?;
    let what = a.file.display().to_string();
    let (kernel, args, l) = lay_out(&ptx, &what, a.kernel.as_deref(), (a.grid, a.block), &a.args, &spec)?;
    if !a.json {
        let (blocks, on) = (kernel.program.blocks.len(), if inside { "the spliced model" } else { "layers" });
        eprintln!("{}: {blocks} ROM blocks, grid {} × block {}; building {on} …", kernel.name, a.grid, a.block);
    }
    let (global, steps, tokens, how) = if inside {
        in_the_model(&a, &kernel, (&l.memory, &l.launch), spec)?
    } else {
        let mut runner = Runner::new(Compiled::new(spec).context("compiling the machine")?);
        runner.lockstep = true;
        let report = runner
            .launch(&kernel.program, &l.memory, &l.launch, a.max_steps)
            .with_context(|| format!("running {} on the compiled layers", kernel.name))?;
        (report.global, report.steps, report.tokens, "every step identical to the interpreter's".into())
    };
    let arrays = l.read_arrays(&global);
    if a.json {
        println!("{}", serde_json::json!({ "arrays": arrays, "steps": steps, "tokens": tokens }));
        return Ok(());
    }
    // PTX names parameters after the mangled function (`_Z3addPjj_param_0`): number them instead.
    let positions = args.iter().enumerate().filter(|(_, a)| matches!(a, Arg::Array(_))).map(|(i, _)| i + 1);
    for (i, values) in positions.zip(&arrays) {
        let words: Vec<String> = values.iter().map(u32::to_string).collect();
        println!("arg {i} = [{}]", words.join(", "));
    }
    println!("{steps} machine steps, {tokens} tokens ({how})");
    Ok(())
}

/// Positions a launch on the GPU has room for (4 MiB of token ids).
const GPU_POSITIONS: usize = 1 << 20;

/// The launch inside the spliced model: global memory as its tokens carried it, the steps, the
/// tokens, and what was checked.
fn in_the_model(
    a: &Args,
    kernel: &Kernel,
    (memory, launch_of): (&[u32], &kernels_wasm::qwengpu::interp::Launch),
    spec: MachineSpec,
) -> Result<(Vec<u32>, u64, u64, String)> {
    let SplicedModel { config, model, splice, norms, .. } = spliced_model(a.load.as_deref(), a.model.clone())
        .context("the second design runs inside a spliced text model (`--design first` runs without one)")?;
    let bar = if a.json { ProgressBar::hidden() } else { spinner()? };
    let (out, on) = if a.gpu {
        let gpu = block_on(Gpu::new()).context("opening a WebGPU adapter")?;
        bar.set_message(format!("uploading the machine's layers to {}", gpu.adapter));
        let mut machine = GpuMachine::new(&gpu, &splice, &norms, GPU_POSITIONS).context("uploading the machine")?;
        let program = (spec, &kernel.program);
        let fed = |f: &Fed| bar.set_message(progress(*f));
        let out = block_on(gpu_launch((&gpu, &mut machine), &splice, program, memory, launch_of, a.max_steps, fed))
            .with_context(|| format!("running {} inside the spliced model on {}", kernel.name, gpu.adapter))?;
        (out, format!(" on {}", gpu.adapter))
    } else {
        let mut runner = SplicedRunner::spliced_with(config, &model, &splice, norms)?;
        let out = launch(&mut runner, &splice, (spec, &kernel.program), memory, launch_of, a.max_steps, |f| {
            bar.set_message(progress(f));
            std::ops::ControlFlow::Continue(())
        })
        .with_context(|| format!("running {} inside the spliced model", kernel.name))?;
        (out, String::new())
    };
    bar.finish_and_clear();
    let stores = if out.stores == 1 { "1 global store".to_string() } else { format!("{} global stores", out.stores) };
    let how = format!(
        "{} of the prompt; {} records and VAL tokens chosen by the model's argmax{on}, carrying {stores}, each \
         the interpreter's",
        out.prompt, out.chosen
    );
    Ok((out.global, out.steps, out.tokens, how))
}

/// Lowers `ptx` (`what` names it in errors) for `spec` and lays `args` out for a `(grid, block)`
/// launch. The launch is checked here, before any layers are built (seconds), not after.
pub fn lay_out(
    ptx: &str,
    what: &str,
    entry: Option<&str>,
    (grid, block): (usize, usize),
    args: &[String],
    spec: &MachineSpec,
) -> Result<(Kernel, Vec<Arg>, Layout)> {
    let kernel = lower(ptx, entry, spec).with_context(|| format!("lowering {what}"))?;
    let args: Vec<Arg> = args.iter().enumerate().map(|(i, t)| parse(i + 1, t)).collect::<Result<_, _>>()?;
    let l = layout(&kernel, &args, grid, block, spec)?;
    Machine::new(*spec, kernel.program.clone(), &l.memory, l.launch.clone())?;
    Ok((kernel, args, l))
}

/// The spinner a launch inside the spliced model reports on.
pub fn spinner() -> Result<ProgressBar> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("  {spinner} {msg} ({elapsed})")?);
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Ok(bar)
}

/// The progress line of a launch inside the spliced model.
pub fn progress(f: Fed) -> String {
    match f.steps {
        0 => format!("the prompt: {} tokens (program image, launch, memory)", f.tokens),
        s => format!("{s} steps, {} tokens", f.tokens),
    }
}

/// The text model with the second machine spliced in: from a checkpoint, or -m's model (default
/// SmolLM2) spliced here.
pub struct SplicedModel {
    pub config: Config,
    pub model: FloatModel,
    pub splice: Splice,
    pub norms: StreamNorms,
    pub tokenizer: Option<TextTokenizer>,
}

pub fn spliced_model(load: Option<&Path>, model: Option<PathBuf>) -> Result<SplicedModel> {
    if let Some(dir) = load {
        let c = checkpoint::load(dir)?;
        let tokenizer = Some(checkpoint::tokenizer(dir)?);
        return Ok(SplicedModel { config: c.config, model: c.model, splice: c.splice, norms: c.norms, tokenizer });
    }
    let path = model_path(model)?;
    let loaded = models::load(&path, None).with_context(|| format!("loading {}", path.display()))?;
    let splice = Splice::new(loaded.config)?;
    let norms = splice.norms(&loaded.float);
    Ok(SplicedModel { config: loaded.config, model: loaded.float, splice, norms, tokenizer: loaded.tokenizer })
}
