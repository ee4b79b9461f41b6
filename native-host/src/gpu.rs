//! `native-host gpu bench`: the WebGPU kernels (`kernels_wasm::gpu`) on this machine's adapter:
//! GEMV and GEMM per BitNet format, weights per second, each result checked against the CPU
//! bit for bit (medians of repeated runs in one process); then qwenGPU suite kernels on the
//! compiled layers, steps per second, each checked in lockstep first.

use crate::bitnet::kernel_bench::{median, parse_shape, DEFAULT_SHAPES};
use anyhow::{Context, Result};
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::i2s::{I2sLayout, I2sMatrix};
use kernels_wasm::bitnet::pool::Pool;
use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::bitnet::threads;
use kernels_wasm::bitnet::tl1::Tl1Matrix;
use kernels_wasm::bitnet::tl2::Tl2Matrix;
use kernels_wasm::gpu::bitnet::GpuMatrix;
use kernels_wasm::gpu::qwengpu::{GpuExecutor, MAX_BATCH};
use kernels_wasm::gpu::{block_on, Gpu};
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::run::Runner;
use kernels_wasm::qwengpu::suite::kernels;
use std::rc::Rc;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Shapes as MxK, comma-separated [default: the 125M layout and seed shapes].
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Activation rows per call, comma-separated: 1 is GEMV, more is GEMM.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    batch: Vec<usize>,
    /// Timed runs per case (the median is reported).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// qwenGPU suite kernels to run on the compiled layers on the GPU, comma-separated, or `none`.
    #[arg(long, value_delimiter = ',', default_value = "vadd,warp_scan")]
    qwengpu: Vec<String>,
    /// qwenGPU tokens per submission, comma-separated: 1 returns to the host after every token;
    /// more make each next input record on the GPU (one dispatch per token).
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024")]
    tokens_per_submit: Vec<u32>,
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let shapes = match args.shapes.is_empty() {
        true => DEFAULT_SHAPES.to_vec(),
        false => args.shapes.iter().map(|s| parse_shape(s)).collect::<Result<Vec<_>>>()?,
    };
    if let Some(bad) = args.batch.iter().find(|&&n| n == 0 || n > 512) {
        anyhow::bail!("--batch {bad}: give 1 to 512 activation rows");
    }
    if let Some(bad) = args.tokens_per_submit.iter().find(|&&n| n == 0 || n > MAX_BATCH) {
        anyhow::bail!("--tokens-per-submit {bad}: give 1 to {MAX_BATCH}");
    }
    // Named kernels are checked before any GPU work, so a typo costs nothing.
    let suite: Vec<&str> = kernels().iter().map(|k| k.name).collect();
    if let Some(bad) = args.qwengpu.iter().find(|n| n.as_str() != "none" && !suite.contains(&n.as_str())) {
        anyhow::bail!("--qwengpu: no kernel {bad:?} in the suite (it has {})", suite.join(", "));
    }
    // Shared: the qwenGPU runner keeps its executor (and so the device) for its lifetime.
    let gpu = Rc::new(
        block_on(Gpu::new()).context("no GPU to benchmark (Mesa lavapipe: apt-get install mesa-vulkan-drivers)")?,
    );
    println!("adapter: {}", gpu.adapter);
    println!(
        "timing: wall clock per call (activation quantisation / tables, upload, dispatch, read-back){}",
        if gpu.timestamps { "; GPU: the dispatch alone, from timestamp queries" } else { "; no timestamp queries" }
    );
    println!();
    println!(
        "{:<11} {:<6} {:>5} {:>11} {:>11} {:>13} {:>13}  vs CPU",
        "shape", "format", "n", "wall µs", "GPU µs", "Gweights/s", "GPU Gw/s"
    );
    let pool = Pool::new(1)?;
    for (m, k) in shapes {
        let t = Rng::new((m * 31 + k) as u64).ternary(m, k);
        let i2s = I2sMatrix::pack(&t, I2sLayout::X86).ok();
        let (tl1, tl2) = (Tl1Matrix::pack(&t).ok(), Tl2Matrix::pack(&t).ok());
        for &n in &args.batch {
            let x = Rng::new(7).f32s(n * k, 1.0);
            let mut cases: Vec<(GpuMatrix, Vec<f32>)> = Vec::new();
            let mut cpu = vec![0f32; n * m];
            if let Some(p) = &i2s {
                threads::i2s_gemm(p, &x, Backend::Scalar, &pool, &mut cpu)?;
                cases.push((GpuMatrix::i2s(&gpu, p)?, cpu.clone()));
            }
            if let Some(p) = &tl1 {
                threads::lut_gemm(p, &x, Backend::Scalar, &pool, &mut cpu)?;
                cases.push((GpuMatrix::tl1(&gpu, p)?, cpu.clone()));
            }
            if let Some(p) = &tl2 {
                threads::lut_gemm(p, &x, Backend::Scalar, &pool, &mut cpu)?;
                cases.push((GpuMatrix::tl2(&gpu, p)?, cpu.clone()));
            }
            for (gm, want) in cases {
                let mut y = vec![0f32; n * m];
                let mut gpu_ns = Vec::new();
                let mut failed = None;
                let wall = median(args.iters.max(1), || match block_on(gm.gemm(&gpu, &x, &mut y)) {
                    Ok(ns) => gpu_ns.extend(ns),
                    Err(e) => failed = Some(e),
                });
                if let Some(e) = failed {
                    return Err(e).with_context(|| format!("{} {m}x{k}, {n} rows", gm.format));
                }
                gpu_ns.sort_by(f64::total_cmp);
                let gpu_median = gpu_ns.get(gpu_ns.len() / 2).copied();
                let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                let weights = (n * m * k) as f64;
                let show = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
                println!(
                    "{:<11} {:<6} {:>5} {:>11.1} {:>11} {:>13.3} {:>13}  {}",
                    format!("{m}x{k}"),
                    gm.format,
                    n,
                    wall.as_secs_f64() * 1e6,
                    show(gpu_median.map(|ns| ns / 1e3)),
                    weights / wall.as_secs_f64() / 1e9,
                    gpu_median.map(|ns| format!("{:.3}", weights / ns)).unwrap_or_else(|| "-".into()),
                    if same { "bit-identical" } else { "DIFFERS" }
                );
                if !same {
                    anyhow::bail!("{} {m}x{k}, {n} rows: the GPU result differs from the CPU's", gm.format);
                }
            }
        }
    }
    qwengpu(&gpu, &args.qwengpu, &args.tokens_per_submit)?;
    if gpu.adapter.software {
        println!("\n{} is a CPU emulation: these figures are for regressions only.", gpu.adapter.name);
    }
    Ok(())
}

/// The compiled qwenGPU layers on the GPU: each kernel once in lockstep with the interpreter,
/// then timed without the check per tokens-per-submission size (the EXEC phase batched; the
/// program image, inputs and VAL read-back stay one token per dispatch).
fn qwengpu(gpu: &Rc<Gpu>, names: &[String], sizes: &[u32]) -> Result<()> {
    let names: Vec<&String> = names.iter().filter(|n| n.as_str() != "none").collect();
    if names.is_empty() {
        return Ok(());
    }
    let suite = kernels();
    let spec = MachineSpec::default();
    let compiled = Compiled::new(spec).context("compiling the qwenGPU machine")?;
    let exec = GpuExecutor::new(gpu.clone(), &compiled)?;
    let mut runner = Runner::new(compiled);
    runner.executor = Some(Box::new(exec));
    println!();
    println!(
        "qwenGPU compiled layers on the GPU (a step is one warp running one ROM block; a token one lane-instruction):"
    );
    println!(
        "{:<14} {:>6} {:>7} {:>9} {:>10} {:>9} {:>10} {:>10}  lockstep",
        "kernel", "steps", "tokens", "tok/subm", "ms", "steps/s", "tokens/s", "GPU ms"
    );
    for k in suite.iter().filter(|k| names.iter().any(|n| n.as_str() == k.name)) {
        let (kernel, p, _) = k.machine(k.ptx, &spec).map_err(anyhow::Error::msg)?;
        runner.lockstep = true;
        let checked = runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000).with_context(|| k.name)?;
        if p.read_arrays(&checked.global) != k.expected(&p) {
            anyhow::bail!("{}: the arrays differ from the plain Rust version", k.name);
        }
        runner.lockstep = false;
        for &size in sizes {
            runner.batch = size;
            let t = std::time::Instant::now();
            let report = runner.launch(&kernel.program, &p.memory, &p.launch, 1_000_000)?;
            let secs = t.elapsed().as_secs_f64();
            if report.global != checked.global {
                anyhow::bail!("{}: {size} tokens per submission changed the arrays", k.name);
            }
            let gpu_ms = report.device_seconds.map_or("—".to_string(), |s| format!("{:.1}", s * 1e3));
            println!(
                "{:<14} {:>6} {:>7} {:>9} {:>10.1} {:>9.1} {:>10.0} {:>10}  bit-exact",
                k.name,
                report.steps,
                report.tokens,
                size,
                secs * 1e3,
                report.steps as f64 / secs,
                report.tokens as f64 / secs,
                gpu_ms
            );
        }
    }
    Ok(())
}
