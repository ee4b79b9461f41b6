//! `native-host bitnet bench`: prompt processing (ppN) and generation (tgN) in tokens per
//! second, mean ± standard deviation over repetitions, printed as llama-bench prints them
//! (bitnet.cpp's `e2e_benchmark.py` runs llama-bench with these defaults).
//!
//! As llama-bench: the prompt is random tokens after BOS, processed from an empty cache; the
//! generation test decodes random tokens one at a time from an empty cache; a warm-up run of
//! each comes first and is not counted. As llama-bench's `-d`, `--depth N` runs both tests after
//! N random tokens already in the cache (filled untimed before each run), and names them
//! `pp512 @ dN`; `--cache-type f32` keeps keys and values in f32 instead of F16 (its `-ctk`).

use super::open;
use super::run::Session;
use anyhow::{bail, Result};
use kernels_wasm::bitnet::model::forward::Exec;
use kernels_wasm::bitnet::model::{Cache, Logits};
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
    /// Tokens already in the cache when each test starts (llama-bench's -d).
    #[arg(short = 'd', long, default_value_t = 0)]
    pub depth: usize,
    /// How the KV cache keeps keys and values.
    #[arg(long, value_enum, default_value_t = CacheType::F16)]
    pub cache_type: CacheType,
}

/// The KV cache's element type.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheType {
    /// IEEE halves, as llama.cpp's default cache (the forward pass rounds K and V to F16 anyway).
    F16,
    /// f32: twice the bytes, the same results.
    F32,
}

pub fn run(args: Args) -> Result<()> {
    super::keep_freed_buffers();
    if args.reps == 0 || args.reps > 1000 {
        bail!("-r {}: give 1 to 1000 repetitions", args.reps);
    }
    if args.batch == 0 {
        bail!("-b 0: give at least one token per batch");
    }
    let ctx = args
        .depth
        .checked_add(args.n_prompt.max(args.n_gen) + 1)
        .ok_or_else(|| anyhow::anyhow!("-d {}: too deep", args.depth))?;
    let model = open(&args.model)?;
    let c = model.config.clone();
    let quant = model.blocks.first().map(|b| b.attn.q.quant().name().to_uppercase()).unwrap_or_default();
    let bytes = std::fs::metadata(&args.model)?.len();
    let params = c.ternary_weights() + (c.vocab * c.dim) as u64;
    let mut s = Session::new(model, args.threads, ctx)?;
    if args.cache_type == CacheType::F32 {
        s.cache = Cache::f32(&s.model.config, ctx);
    }
    let mut rng = Rng::new(1);
    let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| (rng.next_u64() % c.vocab as u64) as u32).collect() };
    let depth = tokens(args.depth);
    let at = |test: String| if args.depth > 0 { format!("{test} @ d{}", args.depth) } else { test };
    let mut results = Vec::new();
    if args.n_prompt > 0 {
        let prompt = tokens(args.n_prompt);
        let rates =
            timed(&mut s, args.reps, args.n_prompt, &depth, args.batch, |_| (), |s| feed(s, &prompt, args.batch))?;
        results.push((at(format!("pp{}", args.n_prompt)), rates));
    }
    // Generation streams every weight once per token, so beside each generation run (warm-up
    // included) the same bytes are read plainly, best of three: the cap is what this memory
    // allowed at that moment, and a share taken run by run is not thrown by the host's bandwidth
    // swinging from minute to minute.
    let mut reads = Vec::new();
    if args.n_gen > 0 {
        let gen = tokens(args.n_gen);
        let beside = |s: &Session| {
            let weights = token_weights(&s.model);
            reads.push((0..3).map(|_| read_rate(&weights, args.threads)).fold(0.0, f64::max));
        };
        let rates = timed(&mut s, args.reps, args.n_gen, &depth, args.batch, beside, |s| {
            for &token in &gen {
                s.step(token)?;
            }
            Ok(())
        })?;
        reads.remove(0);
        results.push((at(format!("tg{}", args.n_gen)), rates));
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
    let Some((_, gen_rates)) = results.iter().find(|(t, _)| t.starts_with("tg")) else {
        return Ok(());
    };
    let per_token: usize = token_weights(&s.model).iter().map(|w| w.len()).sum();
    let caps: Vec<f64> = reads.iter().map(|gbs| gbs * 1e9 / per_token as f64).collect();
    let shares: Vec<f64> = gen_rates.iter().zip(&caps).map(|(r, c)| 100.0 * r / c).collect();
    println!(
        "memory read here: {:.1} GB/s on {} threads (the best of three plain reads of the {:.1} MB a token reads, beside each run), so generation is capped near {:.0} tok/s; it ran at {:.0} % of that (median of the runs, {:.0}–{:.0} %)",
        median(&reads),
        args.threads,
        per_token as f64 / 1e6,
        median(&caps),
        median(&shares),
        shares.iter().cloned().fold(f64::INFINITY, f64::min),
        shares.iter().cloned().fold(0.0, f64::max),
    );
    Ok(())
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The bytes one generated token reads: every block's seven matrices and the output layer (the
/// embedding table when it is tied).
fn token_weights(m: &kernels_wasm::bitnet::model::forward::Model) -> Vec<&[u8]> {
    m.blocks
        .iter()
        .flat_map(|b| [&b.attn.q, &b.attn.k, &b.attn.v, &b.attn.o, &b.ffn.gate, &b.ffn.up, &b.ffn.down])
        .map(|l| &l.packed()[..])
        .chain([&m.output.as_ref().unwrap_or(&m.embed).data[..]])
        .collect()
}

/// GB/s of a plain streaming read of `parts` on `threads` threads, each thread summing its share
/// of every part in turn (as the GEMVs split their rows). The bytes are the model's own, in the
/// same memory, on the same pages, so a cap from them is neither flattered nor handicapped by
/// page size or caching.
fn read_rate(parts: &[&[u8]], threads: usize) -> f64 {
    let threads = threads.max(1);
    let bytes: usize = parts.iter().map(|p| p.len()).sum();
    // Timed on each thread from a common start, so spawning the threads is not counted.
    let start = std::sync::Barrier::new(threads);
    let slowest = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                sc.spawn(move || {
                    start.wait();
                    let t = Instant::now();
                    let mut acc = [0u64; 8];
                    for p in parts {
                        let share = p.len().div_ceil(threads);
                        let mine = p.get(i * share..((i + 1) * share).min(p.len())).unwrap_or(&[]);
                        // SAFETY: every bit pattern is a u64; `align_to` keeps the ends as bytes.
                        let (head, words, tail) = unsafe { mine.align_to::<u64>() };
                        sum_words(words, &mut acc);
                        acc[0] = head.iter().chain(tail).fold(acc[0], |a, &b| a.wrapping_add(b as u64));
                    }
                    std::hint::black_box(acc);
                    t.elapsed()
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).max().unwrap_or_default()
    });
    bytes as f64 / slowest.as_secs_f64().max(1e-9) / 1e9
}

/// Adds `words` into eight running sums, compiled for AVX2 where the CPU has it (32-byte loads):
/// a read with the baseline's 16-byte loads understated what the cache levels deliver to the
/// kernels, which load 32 and 64 bytes.
fn sum_words(words: &[u64], acc: &mut [u64; 8]) {
    #[inline(always)]
    fn plain(words: &[u64], acc: &mut [u64; 8]) {
        let lines = words.chunks_exact(8);
        let rest = lines.remainder();
        for x in lines {
            for (a, x) in acc.iter_mut().zip(x) {
                *a = a.wrapping_add(*x);
            }
        }
        acc[0] = rest.iter().fold(acc[0], |a, &b| a.wrapping_add(b));
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(words: &[u64], acc: &mut [u64; 8]) {
        plain(words, acc)
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { avx2(words, acc) };
    }
    plain(words, acc)
}

/// Tokens per second of `reps` runs of `f` (`tokens` each) from a cache holding `depth` (fed
/// `batch` at a time), after one uncounted warm-up run; `beside` runs untimed before each.
fn timed(
    s: &mut Session,
    reps: usize,
    tokens: usize,
    depth: &[u32],
    batch: usize,
    mut beside: impl FnMut(&Session),
    mut f: impl FnMut(&mut Session) -> Result<()>,
) -> Result<Vec<f64>> {
    let mut rates = Vec::new();
    for rep in 0..=reps {
        s.cache.clear();
        feed(s, depth, batch)?;
        beside(s);
        let t = Instant::now();
        f(s)?;
        if rep > 0 {
            rates.push(tokens as f64 / t.elapsed().as_secs_f64());
        }
    }
    Ok(rates)
}

/// `tokens` into the cache, `batch` per forward call: the pp test, and the depth before each run.
fn feed(s: &mut Session, tokens: &[u32], batch: usize) -> Result<()> {
    let ex = Exec::best(&s.pool);
    for chunk in tokens.chunks(batch) {
        s.model.forward(chunk, &mut s.cache, &ex, Logits::Last)?;
    }
    Ok(())
}
