//! Choosing the next token: greedy at temperature 0, otherwise llama.cpp's default chain
//! (top-k 40, top-p 0.95, min-p 0.05, then the temperature) with a seeded generator.

use crate::bitnet::random::Rng;
use alloc::vec::Vec;

/// The highest logit; ties go to the lowest id (as llama.cpp's greedy sampler).
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

pub struct Sampler {
    pub temp: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    rng: Rng,
}

impl Sampler {
    pub fn new(temp: f32, seed: u64) -> Sampler {
        Sampler { temp, top_k: 40, top_p: 0.95, min_p: 0.05, rng: Rng::new(seed) }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temp <= 0.0 || logits.is_empty() {
            return greedy(logits);
        }
        let mut c: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        c.truncate(self.top_k.max(1));
        let probs = |c: &[(u32, f32)], t: f32| -> Vec<f32> {
            let max = c[0].1;
            let e: Vec<f32> = c.iter().map(|x| libm::expf((x.1 - max) / t)).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(|v| v / s).collect()
        };
        let p = probs(&c, 1.0);
        let mut keep = c.len();
        let mut acc = 0.0;
        for (i, &pi) in p.iter().enumerate() {
            acc += pi;
            if acc >= self.top_p {
                keep = i + 1;
                break;
            }
        }
        let floor = p[0] * self.min_p;
        keep = keep.min(p.iter().take_while(|&&pi| pi >= floor).count().max(1));
        c.truncate(keep);
        let p = probs(&c, self.temp);
        let r = (self.rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let mut acc = 0.0;
        for (i, &pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return c[i].0;
            }
        }
        c[c.len() - 1].0
    }
}
