//! `native-host qwengpu drift [-m MODEL] [--json]`: how far splicing the second machine into a
//! text model (`kernels_wasm::qwengpu::splice`) moves the model's next-token distributions on
//! ordinary English (`assets/text/drift.txt`, written for this project): the mean and maximum of
//! `KL(plain ‖ spliced)` over every position of the text, and whether the two models' greedy
//! continuations of ten fixed prompts agree. The plain and the spliced model run side by side,
//! one thread each.

use super::checkpoint;
use crate::ebpf::models;
use crate::ebpf::tokenize::TextTokenizer;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kernels_wasm::qwen3::model::{Config, FloatModel};
use kernels_wasm::qwengpu::splice::drift::{self, Drift, DriftSum, CHUNK};
use kernels_wasm::qwengpu::splice::{Runner, Splice, StreamNorms};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

/// The ten prompts whose greedy continuations must agree.
pub const PROMPTS: [&str; 10] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "To bake a loaf of bread, you first",
    "The three primary colours are",
    "Water boils at a temperature of",
    "My favourite season of the year is autumn because",
    "The quickest way to learn a new language is",
    "In the morning the train station was",
    "A lighthouse is a tower that",
    "Dear friend, thank you for your letter. I",
];

#[derive(clap::Args)]
pub struct Args {
    /// The text model (GGUF or a Hugging Face directory). Default: $SUBSTRATES_SMOLLM2_GGUF, else
    /// the SmolLM2-135M-Instruct file `cargo xtask` fetches into ~/.cache/substrates.
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Run from a spliced checkpoint (`qwengpu splice -o DIR`) instead of splicing -m's model:
    /// its text tensors are the plain model, all of it the spliced one.
    #[arg(long, conflicts_with = "model")]
    pub load: Option<PathBuf>,
    /// The English text to measure on.
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Positions to measure (the text must hold that many).
    #[arg(long, default_value_t = 2000)]
    pub positions: usize,
    /// Tokens per passage: each passage starts a fresh context.
    #[arg(long, default_value_t = 256)]
    pub passage: usize,
    /// Greedy tokens generated per prompt.
    #[arg(long, default_value_t = 24)]
    pub steps: usize,
    /// Print `{"positions", "mean_kl", "max_kl", "greedy_identical", "prompts"}` only.
    #[arg(long)]
    pub json: bool,
}

/// `-m`, else $SUBSTRATES_SMOLLM2_GGUF, else the cached SmolLM2 file.
pub fn model_path(m: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(m) = m {
        return Ok(m);
    }
    if let Some(p) = std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
        return Ok(p.into());
    }
    let home = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| anyhow!("no -m given and no HOME to find the cached SmolLM2 in"))?;
    let p = home.join("substrates/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !p.is_file() {
        bail!("no -m given and {} is missing (`cargo xtask setup` fetches it)", p.display());
    }
    Ok(p)
}

/// The repository's drift text.
pub fn default_text() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/text/drift.txt")
}

/// `text` as passages of at most `passage` tokens, enough to give `positions` predictions
/// (a passage of n tokens gives n − 1).
pub fn passages(tokenizer: &TextTokenizer, text: &str, positions: usize, passage: usize) -> Result<Vec<Vec<usize>>> {
    if passage < 2 {
        bail!("--passage must be at least 2 tokens (a passage of n tokens gives n − 1 positions)");
    }
    let ids = tokenizer.encode(text).context("tokenizing the drift text")?;
    let mut out = Vec::new();
    let mut have = 0;
    for chunk in ids.chunks(passage).filter(|c| c.len() >= 2) {
        if have >= positions {
            break;
        }
        have += chunk.len() - 1;
        out.push(chunk.to_vec());
    }
    if have < positions {
        bail!("the text gives {have} positions in passages of {passage} tokens, fewer than the {positions} asked for");
    }
    Ok(out)
}

/// A text model and the machine spliced into it.
pub struct Subject<'a> {
    pub config: Config,
    pub model: &'a FloatModel,
    pub splice: &'a Splice,
    pub norms: StreamNorms,
}

/// The drift of the spliced model from the plain one over `passages`, greedy on `prompts`: the
/// plain model on a second thread, its logits handed over a chunk of positions at a time.
pub fn measure(
    subject: Subject,
    passages: &[Vec<usize>],
    prompts: &[Vec<usize>],
    steps: usize,
    progress: &ProgressBar,
) -> Result<Drift> {
    let Subject { config, model, splice, norms } = subject;
    let mut spliced = Runner::spliced_with(config, model, splice, norms)?;
    let mut plain = Runner::plain(config, model)?;
    std::thread::scope(|s| -> Result<Drift> {
        let (tx, rx) = sync_channel(1);
        let worker = s.spawn(move || -> Result<Vec<Vec<usize>>> {
            for p in passages {
                plain.reset();
                for chunk in p[..p.len() - 1].chunks(CHUNK) {
                    if tx.send(plain.forward_many(chunk)?).is_err() {
                        return Ok(Vec::new());
                    }
                }
            }
            Ok(prompts.iter().map(|p| drift::greedy(&mut plain, p, steps)).collect::<Result<_, _>>()?)
        });
        let mut sum = DriftSum::default();
        for p in passages {
            spliced.reset();
            for chunk in p[..p.len() - 1].chunks(CHUNK) {
                let theirs = rx.recv().map_err(|_| anyhow!("the plain model's thread stopped"))?;
                for (a, b) in theirs.iter().zip(&spliced.forward_many(chunk)?) {
                    sum.add(a, b);
                }
                progress.inc(chunk.len() as u64);
            }
        }
        let mine = prompts.iter().map(|p| drift::greedy(&mut spliced, p, steps)).collect::<Result<Vec<_>, _>>()?;
        let theirs = worker.join().map_err(|_| anyhow!("the plain model's thread panicked"))??;
        let same = mine.iter().zip(&theirs).filter(|(a, b)| a == b).count();
        Ok(sum.finish(same, prompts.len()))
    })
}

pub fn run(a: Args) -> Result<()> {
    // Either a checkpoint, or -m's model spliced here.
    let (config, model, splice, norms, tokenizer, what) = match &a.load {
        Some(dir) => {
            let c = checkpoint::load(dir)?;
            let t = checkpoint::tokenizer(dir)?;
            (c.config, c.model, c.splice, Some(c.norms), t, format!("the spliced checkpoint {}", dir.display()))
        }
        None => {
            let path = model_path(a.model.clone())?;
            let loaded = models::load(&path, None).with_context(|| format!("loading {}", path.display()))?;
            let t = loaded.tokenizer.ok_or_else(|| anyhow!("{} has no tokenizer", path.display()))?;
            let splice = Splice::new(loaded.config)?;
            let what = format!("{} ({}) spliced with the second machine", path.display(), loaded.format);
            (loaded.config, loaded.float, splice, None, t, what)
        }
    };
    let norms = norms.unwrap_or_else(|| splice.norms(&model));
    let text_path = a.text.unwrap_or_else(default_text);
    let text = std::fs::read_to_string(&text_path).with_context(|| format!("reading {}", text_path.display()))?;
    let passages = passages(&tokenizer, &text, a.positions, a.passage)?;
    let prompts = PROMPTS.iter().map(|p| tokenizer.encode(p)).collect::<Result<Vec<_>, _>>()?;
    let s = splice.sizes();
    if !a.json {
        println!("{what}:");
        println!("  {}", s.to_string().replace('\n', "\n  "));
    }
    let total = passages.iter().map(|p| p.len() as u64 - 1).sum();
    let bar = if a.json { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(ProgressStyle::with_template("  {bar:40} {pos}/{len} positions, {per_sec}, {eta} left")?);
    let d = measure(Subject { config, model: &model, splice: &splice, norms }, &passages, &prompts, a.steps, &bar)?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&d)?);
    } else {
        println!("  KL(plain ‖ spliced) over {} positions: mean {:.3e}, max {:.3e}", d.positions, d.mean_kl, d.max_kl);
        println!(
            "  greedy continuations ({} tokens) identical on {} of {} prompts",
            a.steps, d.greedy_identical, d.prompts
        );
    }
    Ok(())
}
