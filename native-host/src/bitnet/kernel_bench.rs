//! `native-host bitnet kernel-bench`: times the BitNet kernels on every backend this CPU has,
//! against the scalar reference and an optimised f32 GEMV (`matrixmultiply`'s sgemm) on the
//! same shape, and prints one table. Medians of repeated runs, all measured in one process.

use anyhow::Result;
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::i2s::{I2sLayout, I2sMatrix};
use kernels_wasm::bitnet::pool::Pool;
use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::bitnet::threads;
use kernels_wasm::bitnet::tl1::Tl1Matrix;
use kernels_wasm::bitnet::tl2::Tl2Matrix;
use std::time::{Duration, Instant};

/// The 125M dummy layout's GEMV shapes (M×K) come first: the goal is set on them.
pub const DEFAULT_SHAPES: &[(usize, usize)] =
    &[(768, 3072), (3072, 768), (768, 768), (1536, 4096), (4096, 1536), (1536, 1536), (4096, 4096)];

#[derive(clap::Args)]
pub struct Args {
    /// Shapes as MxK, comma-separated [default: the 125M layout and seed shapes].
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Timed runs per case (the median is reported).
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Thread counts, comma-separated (a persistent pool per count, as ggml keeps one).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Activation rows per call: 1 is GEMV (token generation), more is GEMM (prompt).
    #[arg(long, default_value_t = 1)]
    batch: usize,
}

struct Row {
    format: &'static str,
    backend: &'static str,
    threads: usize,
    median: Duration,
}

pub fn run(args: Args) -> Result<()> {
    let shapes = if args.shapes.is_empty() {
        DEFAULT_SHAPES.to_vec()
    } else {
        args.shapes.iter().map(|s| parse_shape(s)).collect::<Result<Vec<_>>>()?
    };
    let (iters, n) = (args.iters.max(1), args.batch);
    if n == 0 || n > 512 {
        anyhow::bail!("--batch {n}: give 1 to 512 activation rows");
    }
    if let Some(bad) = args.threads.iter().find(|&&t| t == 0 || t > 256) {
        anyhow::bail!("--threads {bad}: give 1 to 256 threads");
    }
    let pools = args.threads.iter().map(|&t| Ok((t, Pool::new(t)?))).collect::<Result<Vec<_>>>()?;
    let what = if n == 1 { "GEMV".to_string() } else { format!("GEMM of {n} activation rows") };
    println!("BitNet {what}, median of {iters} runs; time includes activation quantisation / table building");
    println!("backends here: {}", Backend::available().iter().map(|b| b.name()).collect::<Vec<_>>().join(", "));
    println!();
    println!(
        "{:<11} {:<6} {:<8} {:>7} {:>10} {:>12} {:>9} {:>8}",
        "shape", "format", "backend", "threads", "median µs", "Gweights/s", "×scalar", "×f32"
    );
    for (m, k) in shapes {
        let mut rng = Rng::new((m * 31 + k) as u64);
        let t = rng.ternary(m, k);
        let x = rng.f32s(n * k, 1.0);
        let mut y = vec![0f32; n * m];
        let mut rows = Vec::new();

        let wf: Vec<f32> = t.w.iter().map(|&v| v as f32 * t.scale).collect();
        let f32_time = median(iters, || unsafe {
            // SAFETY: wf is m×k row-major; x holds n rows of k (so B = xᵀ is k×n with column
            // stride k), y n rows of m (C = yᵀ is m×n with column stride m).
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                wf.as_ptr(),
                k as isize,
                1,
                x.as_ptr(),
                1,
                k as isize,
                0.0,
                y.as_mut_ptr(),
                1,
                m as isize,
            );
        });
        rows.push(Row { format: "f32", backend: "sgemm", threads: 1, median: f32_time });

        let i2s = if k % 128 == 0 { Some(I2sMatrix::pack(&t, I2sLayout::X86)?) } else { None };
        let tl1 = Tl1Matrix::pack(&t).ok();
        let tl2 = Tl2Matrix::pack(&t).ok();
        for (threads, pool) in &pools {
            let count = *threads;
            for backend in Backend::available() {
                let name = backend.name();
                if let Some(p) = &i2s {
                    let time =
                        median(iters, || threads::i2s_gemm(p, &x, backend, pool, &mut y).expect("shapes checked"));
                    rows.push(Row { format: "I2_S", backend: name, threads: count, median: time });
                }
                // TL1 has no AVX-512 kernel (that backend runs the AVX2 one): not listed twice.
                if let Some(p) = tl1.as_ref().filter(|_| backend != Backend::Avx512) {
                    let time =
                        median(iters, || threads::lut_gemm(p, &x, backend, pool, &mut y).expect("shapes checked"));
                    rows.push(Row { format: "TL1", backend: name, threads: count, median: time });
                }
                if let Some(p) = &tl2 {
                    let time =
                        median(iters, || threads::lut_gemm(p, &x, backend, pool, &mut y).expect("shapes checked"));
                    rows.push(Row { format: "TL2", backend: name, threads: count, median: time });
                }
            }
        }
        rows.sort_by_key(|r| (r.format != "f32", r.format, r.threads));

        let weights = (n * m * k) as f64;
        for row in &rows {
            let scalar = rows
                .iter()
                .find(|r| r.format == row.format && r.backend == "scalar" && r.threads == 1)
                .map(|r| r.median);
            let ratio = |base: Option<Duration>| {
                base.map(|b| format!("{:.2}", b.as_secs_f64() / row.median.as_secs_f64())).unwrap_or_else(|| "-".into())
            };
            println!(
                "{:<11} {:<6} {:<8} {:>7} {:>10.1} {:>12.2} {:>9} {:>8}",
                format!("{m}x{k}"),
                row.format,
                row.backend,
                row.threads,
                row.median.as_secs_f64() * 1e6,
                weights / row.median.as_secs_f64() / 1e9,
                ratio(scalar),
                ratio(Some(f32_time)),
            );
        }
    }
    Ok(())
}

pub(crate) fn median(iters: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<Duration> = (0..iters)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

pub(crate) fn parse_shape(s: &str) -> Result<(usize, usize)> {
    let (m, k) = s.split_once(['x', 'X']).ok_or_else(|| anyhow::anyhow!("shape {s:?}: expected MxK, e.g. 768x3072"))?;
    let parse = |v: &str| v.trim().parse::<usize>().map_err(|e| anyhow::anyhow!("shape {s:?}: {e}"));
    let (m, k) = (parse(m)?, parse(k)?);
    if m == 0 || k == 0 || m.checked_mul(k).is_none_or(|n| n > 1 << 28) {
        anyhow::bail!("shape {s:?}: both sides must be positive and M·K at most 2^28");
    }
    Ok((m, k))
}
