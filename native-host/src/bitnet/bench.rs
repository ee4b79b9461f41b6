//! `native-host bitnet bench`: prompt processing (ppN) and generation (tgN) in tokens per
//! second, mean ± standard deviation over repetitions, printed as llama-bench prints them
//! (bitnet.cpp's `e2e_benchmark.py` runs llama-bench with these defaults).
//!
//! As llama-bench: the prompt is random tokens after BOS, processed from an empty cache; the
//! generation test decodes random tokens one at a time from an empty cache; a warm-up run of
//! each comes first and is not counted.

use super::open;
use super::run::Session;
use anyhow::{bail, Result};
use kernels_wasm::bitnet::model::forward::Exec;
use kernels_wasm::bitnet::model::Logits;
use kernels_wasm::bitnet::random::Rng;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Tokens generated in the tg test (0 skips it).
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_gen: usize,
    /// Prompt tokens in the pp test (0 skips it).
    #[arg(short = 'p', long, default_value_t = 512)]
    pub n_prompt: usize,
    /// Threads.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
    /// Repetitions.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub reps: usize,
    /// Prompt tokens per forward call (bitnet.cpp's e2e_benchmark.py passes -b 1).
    #[arg(short = 'b', long, default_value_t = 512)]
    pub batch: usize,
}

pub fn run(args: Args) -> Result<()> {
    super::keep_freed_buffers();
    if args.reps == 0 || args.reps > 1000 {
        bail!("-r {}: give 1 to 1000 repetitions", args.reps);
    }
    if args.batch == 0 {
        bail!("-b 0: give at least one token per batch");
    }
    let ctx = (args.n_prompt.max(args.n_gen) + 1).max(1);
    let model = open(&args.model)?;
    let c = model.config.clone();
    let quant = model.blocks.first().map(|b| b.attn.q.quant().name().to_uppercase()).unwrap_or_default();
    let bytes = std::fs::metadata(&args.model)?.len();
    let params = c.ternary_weights() + (c.vocab * c.dim) as u64;
    let mut s = Session::new(model, args.threads, ctx)?;
    let mut rng = Rng::new(1);
    let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| (rng.next_u64() % c.vocab as u64) as u32).collect() };
    let mut results = Vec::new();
    if args.n_prompt > 0 {
        let prompt = tokens(args.n_prompt);
        let rates = timed(&mut s, args.reps, args.n_prompt, |s| {
            let ex = Exec::best(&s.pool);
            for chunk in prompt.chunks(args.batch) {
                s.model.forward(chunk, &mut s.cache, &ex, Logits::Last)?;
            }
            Ok(())
        })?;
        results.push((format!("pp{}", args.n_prompt), rates));
    }
    if args.n_gen > 0 {
        let gen = tokens(args.n_gen);
        let rates = timed(&mut s, args.reps, args.n_gen, |s| {
            for &token in &gen {
                s.step(token)?;
            }
            Ok(())
        })?;
        results.push((format!("tg{}", args.n_gen), rates));
    }
    let model_name = format!("bitnet {:.0}M {quant}", params as f64 / 1e6);
    println!("| model                  |       size |     params | backend | threads | test  |              t/s |");
    println!("| ---------------------- | ---------: | ---------: | ------- | ------: | ----- | ---------------: |");
    for (test, rates) in &results {
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let var = rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (rates.len().max(2) - 1) as f64;
        println!(
            "| {model_name:<22} | {:>6.2} MiB | {:>8.2} M | {:<7} | {:>7} | {test:<5} | {:>8.2} ± {:>5.2} |",
            bytes as f64 / (1 << 20) as f64,
            params as f64 / 1e6,
            kernels_wasm::bitnet::backend::Backend::best().name(),
            args.threads,
            mean,
            var.sqrt()
        );
    }
    let how = if super::mapped() { "is memory-mapped; pages of it count once read" } else { "is read into memory" };
    println!(
        "peak RSS {:.1} MB (the {:.1} MB file {how})",
        super::peak_rss().unwrap_or(0) as f64 / 1e6,
        bytes as f64 / 1e6
    );
    // Generation streams every weight once per token: what a plain read of memory allows (not
    // measured when there is no generation test: it reads a buffer twice the L3).
    if args.n_gen == 0 {
        return Ok(());
    }
    let per_token: usize = s
        .model
        .blocks
        .iter()
        .flat_map(|b| [&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.ffn.gate, &b.ffn.up, &b.ffn.down])
        .map(|l| l.packed().len())
        .sum::<usize>()
        + s.model.output.as_ref().unwrap_or(&s.model.embed).data.len();
    let gbs = read_bandwidth(args.threads);
    println!(
        "memory read here: {gbs:.1} GB/s on {} threads; a token reads {:.1} MB of weights, so generation is capped near {:.0} tok/s",
        args.threads,
        per_token as f64 / 1e6,
        gbs * 1e9 / per_token as f64
    );
    Ok(())
}

/// Tokens per second of `reps` runs of `f` (`tokens` each) from an empty cache, after one
/// uncounted warm-up run.
fn timed(
    s: &mut Session,
    reps: usize,
    tokens: usize,
    mut f: impl FnMut(&mut Session) -> Result<()>,
) -> Result<Vec<f64>> {
    let mut rates = Vec::new();
    for rep in 0..=reps {
        s.cache.clear();
        let t = Instant::now();
        f(s)?;
        if rep > 0 {
            rates.push(tokens as f64 / t.elapsed().as_secs_f64());
        }
    }
    Ok(rates)
}

/// GB/s of a plain streaming read on `threads` threads, best of 3, of a buffer twice the last-level
/// cache (at least 256 MiB): some machines report an L3 of hundreds of MiB, which a smaller
/// buffer would be read from.
fn read_bandwidth(threads: usize) -> f64 {
    let l3 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .and_then(|s| s.trim().strip_suffix('K').and_then(|k| k.parse::<u64>().ok()))
        .unwrap_or(0)
        << 10;
    let bytes = (2 * l3).clamp(256 << 20, 2 << 30);
    let buf = vec![1u64; (bytes / 8) as usize];
    let chunk = buf.len().div_ceil(threads.max(1));
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let total: u64 = std::thread::scope(|sc| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|c| {
                    sc.spawn(move || {
                        c.chunks_exact(8).fold([0u64; 8], |mut a, x| {
                            for (a, x) in a.iter_mut().zip(x) {
                                *a = a.wrapping_add(*x);
                            }
                            a
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().map(|a| a.iter().sum::<u64>()).unwrap_or(0)).sum()
        });
        std::hint::black_box(total);
        best = best.max((buf.len() * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}
