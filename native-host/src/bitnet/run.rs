//! `native-host bitnet run`: streamed generation as bitnet.cpp's `run_inference.py` (llama-cli)
//! does it, and `--cnv`, a chat loop on stdin.

use super::open;
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::model::forward::Exec;
use kernels_wasm::bitnet::model::sample::Sampler;
use kernels_wasm::bitnet::model::tokenizer::Tokenizer;
use kernels_wasm::bitnet::model::{Cache, Logits, Model};
use kernels_wasm::bitnet::pool::Pool;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Prompt tokens per forward call: a GEMM over this many rows at a time.
pub const PROMPT_BATCH: usize = 512;

#[derive(clap::Args)]
pub struct Args {
    /// The model (GGUF, architecture bitnet, linear layers in I2_S, TL1 or TL2).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The prompt (with --cnv: the system prompt).
    #[arg(short = 'p', long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate (per turn with --cnv).
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_predict: usize,
    /// Threads.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
    /// Context size in tokens.
    #[arg(short = 'c', long, default_value_t = 2048)]
    pub ctx_size: usize,
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Chat: read user turns from stdin until end of input.
    #[arg(long)]
    pub cnv: bool,
}

/// A model, its threads and its cache: the state a run (or a chat) keeps.
pub struct Session {
    pub model: Model,
    pub pool: Pool,
    pub cache: Cache,
}

impl Session {
    pub fn new(model: Model, threads: usize, ctx: usize) -> Result<Session> {
        if threads == 0 || threads > 256 {
            bail!("-t {threads}: give 1 to 256 threads");
        }
        if ctx == 0 || ctx > 1 << 20 {
            bail!("-c {ctx}: give a context of 1 to 1048576 tokens");
        }
        // Refuse a context whose cache this machine cannot hold rather than fail inside the
        // allocator.
        let c = &model.config;
        let bytes = Cache::bytes_for(c, c.layers, ctx);
        if bytes > 32 << 30 {
            bail!("-c {ctx}: the KV cache would take {:.1} GB; give a shorter context", bytes as f64 / 1e9);
        }
        let cache = Cache::new(&model.config, ctx);
        Ok(Session { pool: Pool::new(threads)?, cache, model })
    }

    /// Feeds `tokens` in batches; the logits of the last one.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            bail!("the prompt is empty and this model adds no BOS token: nothing to continue from");
        }
        let ex = Exec::best(&self.pool);
        let mut logits = Vec::new();
        for chunk in tokens.chunks(PROMPT_BATCH) {
            logits = self.model.forward(chunk, &mut self.cache, &ex, Logits::Last)?;
        }
        Ok(logits)
    }

    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let ex = Exec::best(&self.pool);
        Ok(self.model.forward(&[token], &mut self.cache, &ex, Logits::Last)?)
    }
}

struct Stats {
    prompt: (usize, Duration),
    gen: (usize, Duration),
}

pub fn run(args: Args) -> Result<()> {
    super::keep_freed_buffers();
    let t0 = Instant::now();
    let model = open(&args.model)?;
    let Some(tok) = model.tokenizer.clone() else {
        bail!(
            "{}: the model carries no tokenizer (tokenizer.ggml.*), so it cannot read a text prompt",
            args.model.display()
        )
    };
    let c = &model.config;
    eprintln!(
        "model: {} layers, dim {}, vocab {}, {} linear layers; loaded in {:.0} ms (weights {})",
        c.layers,
        c.dim,
        c.vocab,
        model.blocks.first().map(|b| b.attn.q.quant().name().to_uppercase()).unwrap_or_default(),
        t0.elapsed().as_secs_f64() * 1e3,
        if super::mapped() { "memory-mapped" } else { "read into memory" }
    );
    if args.ctx_size > c.context {
        eprintln!("note: -c {} is beyond the {} tokens the model was made for", args.ctx_size, c.context);
    }
    let mut s = Session::new(model, args.threads, args.ctx_size)?;
    let mut sampler = Sampler::new(args.temp, args.seed);
    let mut stats = Stats { prompt: (0, Duration::ZERO), gen: (0, Duration::ZERO) };
    if !args.cnv {
        let ids = tok.encode(&args.prompt, true)?;
        print_bytes(&tok.decode(&ids))?;
        generate(&mut s, &tok, &ids, args.n_predict, &mut sampler, &mut stats)?;
        println!();
    } else {
        let mut first = true;
        if !args.prompt.is_empty() {
            let ids = tok.encode(&format!("System: {}\n", args.prompt), true)?;
            let t = Instant::now();
            s.prefill(&ids)?;
            stats.prompt = (ids.len(), t.elapsed());
            first = false;
        }
        let stdin = std::io::stdin();
        loop {
            eprint!("\n> ");
            let mut line = String::new();
            if stdin.lock().read_line(&mut line).context("reading stdin")? == 0 {
                break;
            }
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            let ids = tok.encode(&format!("User: {line}\nAssistant:"), first)?;
            first = false;
            generate(&mut s, &tok, &ids, args.n_predict, &mut sampler, &mut stats)?;
        }
        eprintln!();
    }
    let rate = |(n, d): (usize, Duration)| n as f64 / d.as_secs_f64().max(1e-9);
    eprintln!(
        "prompt: {} tokens, {:.1} tok/s | generation: {} tokens, {:.1} tok/s | {} threads, {} | peak RSS {:.1} MB",
        stats.prompt.0,
        rate(stats.prompt),
        stats.gen.0,
        rate(stats.gen),
        args.threads,
        kernels_wasm::bitnet::backend::Backend::best().name(),
        super::peak_rss().unwrap_or(0) as f64 / 1e6
    );
    Ok(())
}

/// Feeds `ids`, then samples up to `n` tokens, printing each as it comes; stops at EOS or at the
/// end of the context.
fn generate(
    s: &mut Session,
    tok: &Tokenizer,
    ids: &[u32],
    n: usize,
    sampler: &mut Sampler,
    stats: &mut Stats,
) -> Result<()> {
    if s.cache.len + ids.len() > s.cache.context {
        bail!(
            "the prompt needs {} tokens and {} of the {}-token context are left (-c)",
            ids.len(),
            s.cache.context - s.cache.len,
            s.cache.context
        );
    }
    let t = Instant::now();
    let mut logits = s.prefill(ids)?;
    stats.prompt.0 += ids.len();
    stats.prompt.1 += t.elapsed();
    let t = Instant::now();
    for _ in 0..n {
        let next = sampler.sample(&logits);
        if Some(next) == tok.eos {
            break;
        }
        print_bytes(&tok.piece(next))?;
        stats.gen.0 += 1;
        if s.cache.len >= s.cache.context {
            eprintln!("\n(context full: {} tokens)", s.cache.context);
            break;
        }
        logits = s.step(next)?;
    }
    stats.gen.1 += t.elapsed();
    Ok(())
}

fn print_bytes(b: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(b)?;
    out.flush()?;
    Ok(())
}
