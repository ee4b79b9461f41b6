//! `native-host bitnet kl`: how far a model's next-token distributions drift from a base
//! model's over the same text, as llama-perplexity's `--kl-divergence` reports it: the mean
//! KL(base ‖ model) per position, its spread, and how often the two agree on the top token.
//! Used to price a quantised output layer (`bitnet convert --output-type q8_0`) against F16.

use super::open;
use super::run::Session;
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::model::forward::Exec;
use kernels_wasm::bitnet::model::Logits;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The reference model (e.g. the F16-output file).
    #[arg(long)]
    pub base: PathBuf,
    /// The model to compare (the same weights with a quantised output layer, say).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Text to score (default: a built-in English passage).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Tokens per window (each window runs from an empty cache, as llama-perplexity's chunks).
    #[arg(short = 'c', long, default_value_t = 128)]
    pub ctx: usize,
    /// Threads.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
}

/// What `--text` defaults to: plain prose, so the tokenizer sees ordinary words.
const PASSAGE: &str = "The river rises in the hills to the north and runs south through farmland \
before it reaches the sea. In spring the water is high and fast, and the mills along its banks \
work from dawn until dark. By late summer it is slow and clear, and children wade across it at the \
ford below the old stone bridge. The town grew up where the road from the capital meets the river, \
and for three hundred years its market has been held on the same square, every Thursday, in rain \
or sun. Travellers who stop there often remark on the bells of the church, which ring the hours \
a little before the clock in the town hall does, so that every hour is announced twice.";

/// KL statistics over positions.
#[derive(Debug, Default)]
pub struct Drift {
    pub positions: usize,
    pub mean: f64,
    pub max: f64,
    /// Positions where both models' most likely next token is the same.
    pub top1_agree: usize,
}

/// `KL(p ‖ q)` of two logit rows (softmax in f64), and whether their argmaxes agree.
pub fn kl_row(base: &[f32], model: &[f32]) -> (f64, bool) {
    let log_softmax = |l: &[f32]| {
        let max = l.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let lse = l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
        l.iter().map(|&v| v as f64 - lse).collect::<Vec<f64>>()
    };
    let (lp, lq) = (log_softmax(base), log_softmax(model));
    let kl: f64 = lp.iter().zip(&lq).map(|(&a, &b)| a.exp() * (a - b)).sum();
    let argmax = |l: &[f32]| l.iter().enumerate().fold(0, |best, (i, &v)| if v > l[best] { i } else { best });
    (kl.max(0.0), argmax(base) == argmax(model))
}

pub fn run(args: Args) -> Result<()> {
    super::keep_freed_buffers();
    if args.ctx < 2 {
        bail!("-c {}: give a window of at least 2 tokens", args.ctx);
    }
    let text = match &args.text {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => PASSAGE.to_string(),
    };
    let (base, model) = (open(&args.base)?, open(&args.model)?);
    if (base.config.vocab, base.config.dim) != (model.config.vocab, model.config.dim) {
        bail!("{} and {} are not the same model shape", args.base.display(), args.model.display());
    }
    let tok = base.tokenizer.clone().with_context(|| format!("{} carries no tokenizer", args.base.display()))?;
    let tokens = tok.encode(&text, true).map_err(|e| anyhow::anyhow!("tokenizing the text: {e}"))?;
    if tokens.len() < 2 {
        bail!("the text gives {} token(s): nothing to predict", tokens.len());
    }
    let sizes = [&args.base, &args.model].map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
    let mut sessions = [Session::new(base, args.threads, args.ctx)?, Session::new(model, args.threads, args.ctx)?];
    let mut d = Drift::default();
    let mut sum = 0.0;
    for window in tokens.chunks(args.ctx).filter(|w| w.len() >= 2) {
        let logits: Vec<Vec<f32>> = sessions
            .iter_mut()
            .map(|s| {
                s.cache.clear();
                let ex = Exec::best(&s.pool);
                s.model.forward(window, &mut s.cache, &ex, Logits::All).map_err(anyhow::Error::from)
            })
            .collect::<Result<_>>()?;
        let vocab = logits[0].len() / window.len();
        // The last position predicts past the window: scored like every other.
        for (p, q) in logits[0].chunks_exact(vocab).zip(logits[1].chunks_exact(vocab)) {
            let (kl, same) = kl_row(p, q);
            sum += kl;
            d.max = d.max.max(kl);
            d.positions += 1;
            d.top1_agree += same as usize;
        }
    }
    d.mean = sum / d.positions.max(1) as f64;
    println!(
        "base  {} ({:.2} MiB)\nmodel {} ({:.2} MiB)",
        args.base.display(),
        sizes[0] as f64 / (1 << 20) as f64,
        args.model.display(),
        sizes[1] as f64 / (1 << 20) as f64
    );
    println!(
        "KL(base ‖ model) over {} positions: mean {:.6}, max {:.6}; same top token at {:.2} %",
        d.positions,
        d.mean,
        d.max,
        100.0 * d.top1_agree as f64 / d.positions.max(1) as f64
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn kl_is_zero_for_equal_rows_and_positive_otherwise() {
        let a = [1.0f32, 2.0, 3.0, -1.0];
        assert_eq!(super::kl_row(&a, &a), (0.0, true));
        let b = [1.0f32, 2.5, 2.9, -1.0];
        let (kl, same) = super::kl_row(&a, &b);
        // Against the definition written out: p = softmax(a), q = softmax(b).
        let sm = |l: &[f32]| {
            let e: Vec<f64> = l.iter().map(|&v| (v as f64).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|v| v / s).collect::<Vec<_>>()
        };
        let (p, q) = (sm(&a), sm(&b));
        let want: f64 = p.iter().zip(&q).map(|(p, q)| p * (p / q).ln()).sum();
        assert!((kl - want).abs() < 1e-12 && kl > 0.0 && same, "{kl} vs {want}");
        assert!(!super::kl_row(&a, &[3.0, 2.0, 1.0, 0.0]).1);
    }
}
