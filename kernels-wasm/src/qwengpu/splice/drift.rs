//! Text drift (issue #22): how far the spliced model's next-token distributions move from the
//! plain model's on ordinary text. At each position, `KL(plain ‖ spliced)` over the text tokens,
//! the spliced distribution normalised over its whole vocabulary, so any probability the machine
//! tokens take counts as drift. Sums in f64, each distribution as a log-softmax.

use super::{Runner, SpliceError};
use crate::bitnet::model::sample::greedy as argmax;
use alloc::vec::Vec;

/// Positions run at once ([`Runner::forward_many`]): a weight row is read once for all of them.
pub const CHUNK: usize = 64;

/// The figures `native-host qwengpu drift --json` prints.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Drift {
    pub positions: usize,
    pub mean_kl: f64,
    pub max_kl: f64,
    /// Prompts whose greedy continuations are the same token for token.
    pub greedy_identical: usize,
    pub prompts: usize,
}

/// `ln Σ exp(l)`, from the largest logit.
fn log_sum_exp(l: &[f32]) -> f64 {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln()
}

/// `KL(p ‖ q)` for `p` over `p.len()` tokens and `q` over those and maybe more (the machine's).
pub fn kl(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (log_sum_exp(p), log_sum_exp(q));
    p.iter()
        .zip(q)
        .map(|(&a, &b)| {
            let log_p = a as f64 - lp;
            log_p.exp() * (log_p - (b as f64 - lq))
        })
        .sum::<f64>()
        .max(0.0)
}

/// The running sum of per-position KLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct DriftSum {
    pub positions: usize,
    pub total: f64,
    pub max: f64,
}

impl DriftSum {
    pub fn add(&mut self, plain: &[f32], spliced: &[f32]) {
        let d = kl(plain, spliced);
        self.positions += 1;
        self.total += d;
        self.max = self.max.max(d);
    }

    pub fn finish(self, greedy_identical: usize, prompts: usize) -> Drift {
        let mean_kl = if self.positions == 0 { 0.0 } else { self.total / self.positions as f64 };
        Drift { positions: self.positions, mean_kl, max_kl: self.max, greedy_identical, prompts }
    }
}

/// `prompt`, then `steps` tokens each the argmax over the runner's whole vocabulary (from a
/// fresh context).
pub fn greedy(runner: &mut Runner, prompt: &[usize], steps: usize) -> Result<Vec<usize>, SpliceError> {
    runner.reset();
    let mut logits = Vec::new();
    for &t in prompt {
        logits = runner.forward(t)?;
    }
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        if logits.is_empty() {
            break;
        }
        let next = argmax(&logits) as usize;
        out.push(next);
        logits = runner.forward(next)?;
    }
    Ok(out)
}

/// The drift of `spliced` from `plain` over `passages` (each from a fresh context; every
/// position but a passage's last predicts a token of it), and whether their greedy continuations
/// of `prompts` agree for `steps` tokens. One thread; `progress(done, of)` after each passage.
pub fn measure(
    plain: &mut Runner,
    spliced: &mut Runner,
    passages: &[Vec<usize>],
    prompts: &[Vec<usize>],
    steps: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Drift, SpliceError> {
    let mut sum = DriftSum::default();
    for (i, passage) in passages.iter().enumerate() {
        plain.reset();
        spliced.reset();
        for chunk in passage[..passage.len().saturating_sub(1)].chunks(CHUNK) {
            for (p, s) in plain.forward_many(chunk)?.iter().zip(&spliced.forward_many(chunk)?) {
                sum.add(p, s);
            }
        }
        progress(i + 1, passages.len());
    }
    let mut same = 0;
    for p in prompts {
        same += usize::from(greedy(plain, p, steps)? == greedy(spliced, p, steps)?);
    }
    Ok(sum.finish(same, prompts.len()))
}
