//! The f32 reference forward pass of Qwen3, as the model card defines it (RMSNorm with a learned
//! scale, QK-norm, rotate-half RoPE, softmax attention scaled by 1/√head_dim with GQA, SwiGLU,
//! tied LM head), and of its llama (no QK-norm) and qwen2 (q/k/v biases) relatives. The golden
//! integer model is measured against it.

use super::model::{Config, FloatModel};
use alloc::vec;
use alloc::vec::Vec;

fn rms_norm(x: &[f32], w: &[f32], eps: f64) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + eps as f32).sqrt();
    x.iter().zip(w).map(|(v, w)| v * inv * w).collect()
}

fn add_bias(v: &mut [f32], bias: &[f32]) {
    for (x, b) in v.iter_mut().zip(bias) {
        *x += b;
    }
}

fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len()).map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}

fn rope(head: &mut [f32], theta: f64, pos: usize) {
    let half = head.len() / 2;
    for i in 0..half {
        let angle = pos as f64 * theta.powf(-(2.0 * i as f64) / head.len() as f64);
        let (c, s) = (angle.cos() as f32, angle.sin() as f32);
        let (a, b) = (head[i], head[i + half]);
        head[i] = a * c - b * s;
        head[i + half] = b * c + a * s;
    }
}

/// An f32 Qwen3 with its own KV cache.
pub struct Reference<'a> {
    pub config: Config,
    pub weights: &'a FloatModel,
    cache: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
}

impl<'a> Reference<'a> {
    pub fn new(config: Config, weights: &'a FloatModel) -> Self {
        Reference { config, weights, cache: vec![Vec::new(); config.layers] }
    }

    /// Next-token logits after `token` at the next position.
    pub fn forward(&mut self, token: usize) -> Vec<f32> {
        let c = self.config;
        let (hd, eps) = (c.head_dim, c.rms_eps);
        let pos = self.cache[0].len();
        let mut x = self.weights.embed[token * c.hidden..(token + 1) * c.hidden].to_vec();
        for (l, cache) in self.weights.layers.iter().zip(&mut self.cache) {
            let h = rms_norm(&x, &l.input_norm, eps);
            let mut q = matvec(&l.q, &h);
            let mut k = matvec(&l.k, &h);
            let mut v = matvec(&l.v, &h);
            if c.qkv_bias {
                add_bias(&mut q, &l.q_bias);
                add_bias(&mut k, &l.k_bias);
                add_bias(&mut v, &l.v_bias);
            }
            for (heads, norm) in [(&mut q, &l.q_norm), (&mut k, &l.k_norm)] {
                for head in heads.chunks_exact_mut(hd) {
                    if c.qk_norm {
                        head.copy_from_slice(&rms_norm(head, norm, eps));
                    }
                    rope(head, c.rope_theta, pos);
                }
            }
            cache.push((k, v));
            let group = c.heads / c.kv_heads;
            let mut attn = vec![0f32; c.q_rows()];
            for h in 0..c.heads {
                let qh = &q[h * hd..(h + 1) * hd];
                let kvh = h / group;
                let scores: Vec<f32> = cache
                    .iter()
                    .map(|(k, _)| {
                        let kh = &k[kvh * hd..(kvh + 1) * hd];
                        qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() / (hd as f32).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f32 = e.iter().sum();
                let out = &mut attn[h * hd..(h + 1) * hd];
                for (w, (_, v)) in e.iter().zip(cache.iter()) {
                    for (o, &vv) in out.iter_mut().zip(&v[kvh * hd..(kvh + 1) * hd]) {
                        *o += w / total * vv;
                    }
                }
            }
            for (xi, oi) in x.iter_mut().zip(matvec(&l.o, &attn)) {
                *xi += oi;
            }
            let h = rms_norm(&x, &l.post_norm, eps);
            let gate = matvec(&l.gate, &h);
            let up = matvec(&l.up, &h);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            for (xi, di) in x.iter_mut().zip(matvec(&l.down, &act)) {
                *xi += di;
            }
        }
        let h = rms_norm(&x, &self.weights.final_norm, eps);
        matvec(self.weights.lm_head(), &h)
    }
}

/// Indices of the `k` largest values, largest first (ties: lower index first).
pub fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen3::model::{Cache, Model};

    /// The golden integer model against f32 on the tiny random model, over a few steps.
    ///
    /// The bound: logits are Q16 (1.5e-5 steps) but the error is dominated by the integer exp,
    /// `(1 − d/1024)^1024` under-weights a score `d` below the maximum by about `d²/2048`
    /// (≤ 1.3 % for d ≤ 5), and by the floors of every >> (each ≤ 2^-16). Through 2 layers and
    /// logits of magnitude ~3 that stays under 0.01 mean absolute error (measured: 0.001–0.004 on
    /// these steps); the 5 largest logits must be the same tokens in the same order unless two of
    /// them are closer than 0.04.
    /// The three architectures; the llama one with an untied LM head.
    #[test]
    fn the_golden_model_tracks_f32() {
        for (arch, c) in Config::TINY_FAMILY {
            let mut f = Model::random_float(c, 4);
            if arch == "llama" {
                f.lm_head = Some(Model::random_float(c, 5).embed);
            }
            tracks_f32(c, &f, arch);
        }
    }

    fn tracks_f32(c: Config, f: &FloatModel, arch: &str) {
        let golden = Model::from_float(c, f).unwrap();
        let mut reference = Reference::new(c, f);
        let mut cache = Cache::default();
        for (pos, token) in [3usize, 141, 59, 26, 535].into_iter().enumerate() {
            let want = reference.forward(token);
            let got = golden.forward(token, pos, &mut cache);
            let got_f: Vec<f32> = got.logits.iter().map(|&v| v as f32 / 65536.0).collect();
            let mae = want.iter().zip(&got_f).map(|(a, b)| (a - b).abs()).sum::<f32>() / want.len() as f32;
            assert!(mae < 0.01, "{arch} position {pos}: logit MAE {mae}");
            let (tw, tg) = (top_k(&want, 5), top_k(&got_f, 5));
            let gap = (0..4).map(|i| want[tw[i]] - want[tw[i + 1]]).fold(f32::MAX, f32::min);
            if gap > 0.04 {
                assert_eq!(tg, tw, "{arch} position {pos}: top-5 differ (smallest gap {gap})");
            } else {
                assert_eq!(tg[0], tw[0], "{arch} position {pos}: top-1 differs");
            }
        }
    }
}
