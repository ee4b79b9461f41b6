//! `native-host gpu bench`: the WebGPU kernels (`kernels_wasm::gpu`) on this machine's adapter:
//! GEMV and GEMM per BitNet format, weights per second, each result checked against the CPU
//! bit for bit. Medians of repeated runs in one process.

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
use kernels_wasm::gpu::{block_on, Gpu};

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
}

pub fn bench(args: BenchArgs) -> Result<()> {
    let shapes = match args.shapes.is_empty() {
        true => DEFAULT_SHAPES.to_vec(),
        false => args.shapes.iter().map(|s| parse_shape(s)).collect::<Result<Vec<_>>>()?,
    };
    if let Some(bad) = args.batch.iter().find(|&&n| n == 0 || n > 512) {
        anyhow::bail!("--batch {bad}: give 1 to 512 activation rows");
    }
    let gpu =
        block_on(Gpu::new()).context("no GPU to benchmark (Mesa lavapipe: apt-get install mesa-vulkan-drivers)")?;
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
    if gpu.adapter.software {
        println!("\n{} is a CPU emulation: these figures are for regressions only.", gpu.adapter.name);
    }
    Ok(())
}
