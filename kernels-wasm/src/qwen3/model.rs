//! The Qwen3 forward pass in qwen3-ebpf's integers: one struct per layer, forward top to bottom
//! as the model defines it (RMSNorm → q/k/v → QK-norm → RoPE → GQA attention → o + residual →
//! RMSNorm → SwiGLU → down + residual; final norm; tied LM head; argmax). This is the golden
//! model: the BPF forward pass must produce exactly these logits.

use super::fixed::{self, OutOfRange, Q_ACT, Q_NORM, Q_W};
use crate::bitnet::random::Rng;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Every dimension of a model the kernels run is at most this (real ones are below 2^18).
const MAX_DIM: usize = 1 << 20;

/// The shape of a Qwen3-family decoder. llama and qwen2 checkpoints fit it too: llama has no
/// QK-norm, qwen2 adds q/k/v biases; both may untie the LM head (see [`FloatModel::lm_head`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub rope_theta: f64,
    pub rms_eps: f64,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
}

impl Config {
    /// For tests: every code path of the real shape, small enough to run in milliseconds.
    pub const TINY: Config = Config {
        hidden: 256,
        intermediate: 512,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 128,
        vocab: 1000,
        rope_theta: 1e6,
        rms_eps: 1e-6,
        qk_norm: true,
        qkv_bias: false,
    };
    /// Qwen3-0.6B (FACTS §1).
    pub const QWEN3_0_6B: Config = Config {
        hidden: 1024,
        intermediate: 3072,
        layers: 28,
        heads: 16,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        rope_theta: 1e6,
        rms_eps: 1e-6,
        qk_norm: true,
        qkv_bias: false,
    };

    /// Tiny shapes of the three architectures, for tests: qwen3 (QK-norm, head_dim 128), llama
    /// (no QK-norm, head_dim 64 = hidden / heads as llama requires, ε 1e-5) and qwen2 (q/k/v
    /// biases).
    pub const TINY_FAMILY: [(&'static str, Config); 3] = [
        ("qwen3", Config::TINY),
        (
            "llama",
            Config {
                head_dim: 64,
                heads: 4,
                kv_heads: 2,
                rms_eps: 1e-5,
                qk_norm: false,
                rope_theta: 1e5,
                ..Config::TINY
            },
        ),
        ("qwen2", Config { qk_norm: false, qkv_bias: true, ..Config::TINY }),
    ];

    /// The shapes the CLIs generate, by name.
    pub const NAMED: [(&'static str, Config); 2] = [("tiny", Config::TINY), ("qwen3-0.6b", Config::QWEN3_0_6B)];

    pub fn named(name: &str) -> Option<Config> {
        Config::NAMED.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
    }

    /// The largest dimension [`Config::check`] accepts.
    pub const MAX_DIMENSION: usize = MAX_DIM;

    pub fn q_rows(&self) -> usize {
        self.heads * self.head_dim
    }

    pub fn kv_rows(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Rows of the fused q|k|v matrix.
    pub fn qkv_rows(&self) -> usize {
        self.q_rows() + 2 * self.kv_rows()
    }

    pub fn heads(&self) -> fixed::Heads {
        fixed::Heads { heads: self.heads, kv_heads: self.kv_heads, dim: self.head_dim }
    }

    /// `rms_eps` in Q32, as the integer RMSNorm adds it.
    pub fn eps_q32(&self) -> u64 {
        fixed::eps_q32(self.rms_eps)
    }

    /// Why the kernels cannot run this shape, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let c = self;
        if c.hidden == 0 || c.intermediate == 0 || c.layers == 0 || c.vocab == 0 || c.heads == 0 || c.kv_heads == 0 {
            return Err("a dimension is zero".into());
        }
        // Headers may declare anything: bounding each dimension keeps every product the shapes
        // take (q_rows, kv_rows, qkv_rows) far inside a usize (fuzzing found 2^62 heads).
        let dims = [
            ("hidden", c.hidden),
            ("intermediate", c.intermediate),
            ("layers", c.layers),
            ("vocab", c.vocab),
            ("heads", c.heads),
            ("kv_heads", c.kv_heads),
        ];
        if let Some((what, v)) = dims.iter().find(|(_, v)| *v > MAX_DIM) {
            return Err(alloc::format!("{what} {v} is over the limit of {MAX_DIM}"));
        }
        if !c.heads.is_multiple_of(c.kv_heads) {
            return Err(alloc::format!("{} query heads are not a multiple of {} KV heads", c.heads, c.kv_heads));
        }
        if c.head_dim == 0 || c.head_dim > fixed::MAX_HEAD_DIM || !c.head_dim.is_multiple_of(2) {
            return Err(alloc::format!(
                "head_dim {} (the kernels take even sizes up to {})",
                c.head_dim,
                fixed::MAX_HEAD_DIM
            ));
        }
        let sane = (0.0..1.0).contains(&c.rms_eps) && c.rope_theta > 1.0 && c.rope_theta.is_finite();
        if !sane {
            return Err(alloc::format!("rms_eps {} / rope_theta {}", c.rms_eps, c.rope_theta));
        }
        Ok(())
    }
}

/// A weight that does not fit its fixed-point format, named by tensor.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("tensor {tensor}: {source}")]
pub struct BadTensor {
    pub tensor: String,
    pub source: OutOfRange,
}

/// One decoder layer's weights in fixed point. q|k|v and gate|up are fused row-wise (they read
/// the same input), so each is one matrix-vector product.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub input_norm: Vec<i32>,
    pub qkv: Vec<i32>,
    /// q|k|v biases in Q16 (added to the products); empty without [`Config::qkv_bias`].
    pub qkv_bias: Vec<i32>,
    /// QK-norm scales; empty without [`Config::qk_norm`].
    pub q_norm: Vec<i32>,
    pub k_norm: Vec<i32>,
    pub o: Vec<i32>,
    pub post_norm: Vec<i32>,
    pub gate_up: Vec<i32>,
    pub down: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub config: Config,
    /// Token embeddings as Q16 activations (vocab × hidden).
    pub embed: Vec<i32>,
    /// The LM head as Q24 weights: the embeddings again when tied.
    pub lm_head: Vec<i32>,
    pub layers: Vec<Layer>,
    pub final_norm: Vec<i32>,
}

/// f32 tensors of one layer, as a checkpoint stores them (row-major `out × in`).
#[derive(Debug, Clone, Default)]
pub struct FloatLayer {
    pub input_norm: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Empty when the model has no q/k/v biases.
    pub q_bias: Vec<f32>,
    pub k_bias: Vec<f32>,
    pub v_bias: Vec<f32>,
    /// Empty when the model has no QK-norm.
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub o: Vec<f32>,
    pub post_norm: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

/// The tensors of a decoder layer by role, with the names Hugging Face (`model.layers.{i}.` +
/// name + `.weight`/`.bias`) and GGUF (`blk.{i}.` + name + …) give them: the one table the
/// checkpoint readers and writers of both formats go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerTensor {
    InputNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    O,
    PostNorm,
    Gate,
    Up,
    Down,
}

impl LayerTensor {
    pub const ALL: [LayerTensor; 14] = {
        use LayerTensor::*;
        [InputNorm, Q, K, V, QBias, KBias, VBias, QNorm, KNorm, O, PostNorm, Gate, Up, Down]
    };

    /// (HF name, GGUF name, is a bias).
    pub fn names(self) -> (&'static str, &'static str, bool) {
        use LayerTensor::*;
        match self {
            InputNorm => ("input_layernorm", "attn_norm", false),
            Q => ("self_attn.q_proj", "attn_q", false),
            K => ("self_attn.k_proj", "attn_k", false),
            V => ("self_attn.v_proj", "attn_v", false),
            QBias => ("self_attn.q_proj", "attn_q", true),
            KBias => ("self_attn.k_proj", "attn_k", true),
            VBias => ("self_attn.v_proj", "attn_v", true),
            QNorm => ("self_attn.q_norm", "attn_q_norm", false),
            KNorm => ("self_attn.k_norm", "attn_k_norm", false),
            O => ("self_attn.o_proj", "attn_output", false),
            PostNorm => ("post_attention_layernorm", "ffn_norm", false),
            Gate => ("mlp.gate_proj", "ffn_gate", false),
            Up => ("mlp.up_proj", "ffn_up", false),
            Down => ("mlp.down_proj", "ffn_down", false),
        }
    }

    /// The tensor's shape (outer dimension first) in a model of `c`'s shape, or `None` when
    /// the architecture has no such tensor.
    pub fn shape(self, c: &Config) -> Option<Vec<usize>> {
        use LayerTensor::*;
        let (h, q, kv, i, hd) = (c.hidden, c.q_rows(), c.kv_rows(), c.intermediate, c.head_dim);
        match self {
            QBias | KBias | VBias if !c.qkv_bias => None,
            QNorm | KNorm if !c.qk_norm => None,
            InputNorm | PostNorm => Some(vec![h]),
            Q => Some(vec![q, h]),
            K | V => Some(vec![kv, h]),
            QBias => Some(vec![q]),
            KBias | VBias => Some(vec![kv]),
            QNorm | KNorm => Some(vec![hd]),
            O => Some(vec![h, q]),
            Gate | Up => Some(vec![i, h]),
            Down => Some(vec![h, i]),
        }
    }
}

/// `FloatLayer::tensor` and `tensor_mut` from one list of (role, field).
macro_rules! layer_fields {
    ($($role:ident => $field:ident),* $(,)?) => {
        impl FloatLayer {
            pub fn tensor(&self, t: LayerTensor) -> &[f32] {
                match t { $(LayerTensor::$role => &self.$field),* }
            }

            pub fn tensor_mut(&mut self, t: LayerTensor) -> &mut Vec<f32> {
                match t { $(LayerTensor::$role => &mut self.$field),* }
            }
        }
    };
}

layer_fields!(
    InputNorm => input_norm, Q => q, K => k, V => v, QBias => q_bias, KBias => k_bias, VBias => v_bias,
    QNorm => q_norm, KNorm => k_norm, O => o, PostNorm => post_norm, Gate => gate, Up => up, Down => down,
);

impl FloatLayer {
    /// A layer of `c`'s shape from `get(tensor, shape)` for every tensor the architecture has.
    pub fn read<E>(c: &Config, mut get: impl FnMut(LayerTensor, &[usize]) -> Result<Vec<f32>, E>) -> Result<Self, E> {
        let mut layer = FloatLayer::default();
        for t in LayerTensor::ALL {
            if let Some(shape) = t.shape(c) {
                *layer.tensor_mut(t) = get(t, &shape)?;
            }
        }
        Ok(layer)
    }

    /// Every tensor the architecture has, with its shape.
    pub fn tensors(&self, c: &Config) -> Vec<(LayerTensor, Vec<usize>, &[f32])> {
        LayerTensor::ALL.into_iter().filter_map(|t| t.shape(c).map(|s| (t, s, self.tensor(t)))).collect()
    }
}

#[derive(Debug, Clone, Default)]
pub struct FloatModel {
    pub embed: Vec<f32>,
    pub layers: Vec<FloatLayer>,
    pub final_norm: Vec<f32>,
    /// `None` when tied to `embed`.
    pub lm_head: Option<Vec<f32>>,
}

impl FloatModel {
    pub fn lm_head(&self) -> &[f32] {
        self.lm_head.as_deref().unwrap_or(&self.embed)
    }
}

fn fixed_tensor(name: impl Fn() -> String, v: &[f32], bits: u32) -> Result<Vec<i32>, BadTensor> {
    fixed::tensor_to_fixed(v, bits).map_err(|source| BadTensor { tensor: name(), source })
}

impl Model {
    /// Converts f32 weights: matrices to Q24, norm scales to Q20, embeddings to Q16 and Q24.
    pub fn from_float(config: Config, f: &FloatModel) -> Result<Model, BadTensor> {
        let layers = f
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let t = |name: &str, v: &[f32], bits| fixed_tensor(|| alloc::format!("layers.{i}.{name}"), v, bits);
                let mut qkv = t("self_attn.q_proj", &l.q, Q_W)?;
                qkv.extend(t("self_attn.k_proj", &l.k, Q_W)?);
                qkv.extend(t("self_attn.v_proj", &l.v, Q_W)?);
                let mut qkv_bias = t("self_attn.q_proj.bias", &l.q_bias, Q_ACT)?;
                qkv_bias.extend(t("self_attn.k_proj.bias", &l.k_bias, Q_ACT)?);
                qkv_bias.extend(t("self_attn.v_proj.bias", &l.v_bias, Q_ACT)?);
                let mut gate_up = t("mlp.gate_proj", &l.gate, Q_W)?;
                gate_up.extend(t("mlp.up_proj", &l.up, Q_W)?);
                Ok(Layer {
                    input_norm: t("input_layernorm", &l.input_norm, Q_NORM)?,
                    qkv,
                    qkv_bias,
                    q_norm: t("self_attn.q_norm", &l.q_norm, Q_NORM)?,
                    k_norm: t("self_attn.k_norm", &l.k_norm, Q_NORM)?,
                    o: t("self_attn.o_proj", &l.o, Q_W)?,
                    post_norm: t("post_attention_layernorm", &l.post_norm, Q_NORM)?,
                    gate_up,
                    down: t("mlp.down_proj", &l.down, Q_W)?,
                })
            })
            .collect::<Result<Vec<_>, BadTensor>>()?;
        Ok(Model {
            config,
            embed: fixed_tensor(|| "embed_tokens".into(), &f.embed, Q_ACT)?,
            lm_head: match &f.lm_head {
                Some(head) => fixed_tensor(|| "lm_head".into(), head, Q_W)?,
                None => fixed_tensor(|| "embed_tokens (as lm_head)".into(), &f.embed, Q_W)?,
            },
            layers,
            final_norm: fixed_tensor(|| "norm".into(), &f.final_norm, Q_NORM)?,
        })
    }

    /// Deterministic random f32 weights of `config`'s shape, scaled like a trained checkpoint
    /// (matrices ±√(3/fan_in), norm scales around 1, embeddings ±1), then converted.
    pub fn random_float(config: Config, seed: u64) -> FloatModel {
        let mut rng = Rng::new(seed);
        let c = config;
        let mut matrix = |rows: usize, cols: usize| rng.f32s(rows * cols, (3.0 / cols as f32).sqrt());
        let layers: Vec<FloatLayer> = (0..c.layers)
            .map(|_| FloatLayer {
                q: matrix(c.q_rows(), c.hidden),
                k: matrix(c.kv_rows(), c.hidden),
                v: matrix(c.kv_rows(), c.hidden),
                o: matrix(c.hidden, c.q_rows()),
                gate: matrix(c.intermediate, c.hidden),
                up: matrix(c.intermediate, c.hidden),
                down: matrix(c.hidden, c.intermediate),
                ..FloatLayer::default()
            })
            .collect();
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut norm = |n: usize| rng.f32s(n, 0.2).into_iter().map(|v| v + 1.0).collect::<Vec<_>>();
        let mut layers: Vec<FloatLayer> = layers
            .into_iter()
            .map(|l| FloatLayer {
                input_norm: norm(c.hidden),
                q_norm: if c.qk_norm { norm(c.head_dim) } else { Vec::new() },
                k_norm: if c.qk_norm { norm(c.head_dim) } else { Vec::new() },
                post_norm: norm(c.hidden),
                ..l
            })
            .collect();
        let final_norm = norm(c.hidden);
        if c.qkv_bias {
            let mut rng = Rng::new(seed ^ 0xb1a5);
            for l in &mut layers {
                (l.q_bias, l.k_bias, l.v_bias) =
                    (rng.f32s(c.q_rows(), 0.5), rng.f32s(c.kv_rows(), 0.5), rng.f32s(c.kv_rows(), 0.5));
            }
        }
        FloatModel { embed: Rng::new(seed ^ 0xe3b).f32s(c.vocab * c.hidden, 1.0), layers, final_norm, lm_head: None }
    }
}

impl Model {
    /// The model the kernel computes when it stores the matrices as `format`: every matrix row
    /// replaced by the Q24 weights that storage amounts to (the identity for Q24).
    pub fn with_weights(&self, format: super::weights::WeightFormat) -> Model {
        let c = self.config;
        let map = |w: &[i32], cols: usize| -> Vec<i32> {
            w.chunks_exact(cols).flat_map(|row| format.effective_row(row)).collect()
        };
        Model {
            config: c,
            embed: self.embed.clone(),
            lm_head: map(&self.lm_head, c.hidden),
            final_norm: self.final_norm.clone(),
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    qkv: map(&l.qkv, c.hidden),
                    o: map(&l.o, c.q_rows()),
                    gate_up: map(&l.gate_up, c.hidden),
                    down: map(&l.down, c.intermediate),
                    ..l.clone()
                })
                .collect(),
        }
    }
}

/// RoPE's cos and sin for one position, Q20, one per rotated pair: angle `pos · θ^(−2i/head_dim)`.
pub fn rope_tables(theta: f64, head_dim: usize, pos: usize) -> (Vec<i32>, Vec<i32>) {
    (0..head_dim / 2)
        .map(|i| {
            let angle = pos as f64 * theta.powf(-(2.0 * i as f64) / head_dim as f64);
            let q = |v: f64| fixed::to_fixed(v, Q_NORM, i).unwrap_or(0); // |cos|, |sin| ≤ 1 always fit
            (q(angle.cos()), q(angle.sin()))
        })
        .unzip()
}

/// The KV cache of the golden model: per layer, per position, this token's keys and values.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    pub layers: Vec<Vec<(Vec<i32>, Vec<i32>)>>,
}

/// The outputs of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub logits: Vec<i32>,
    pub argmax: usize,
}

impl Layer {
    /// One layer for the token at `pos`; `x` is the residual stream (Q16), updated in place.
    pub fn forward(&self, c: &Config, x: &mut [i32], pos: usize, cache: &mut Vec<(Vec<i32>, Vec<i32>)>) {
        let (eps, hd) = (c.eps_q32(), c.head_dim);
        let mut h = vec![0; c.hidden];
        fixed::rms_norm(x, &self.input_norm, eps, &mut h);
        let mut qkv = vec![0; c.qkv_rows()];
        fixed::matvec(&self.qkv, &h, &mut qkv);
        if c.qkv_bias {
            fixed::add(&mut qkv, &self.qkv_bias);
        }
        let (q, kv) = qkv.split_at_mut(c.q_rows());
        let (k, v) = kv.split_at_mut(c.kv_rows());
        if c.qk_norm {
            fixed::rms_norm_segments(q, &self.q_norm, c.heads, eps);
            fixed::rms_norm_segments(k, &self.k_norm, c.kv_heads, eps);
        }
        let (cos, sin) = rope_tables(c.rope_theta, hd, pos);
        for head in q.chunks_exact_mut(hd).chain(k.chunks_exact_mut(hd)) {
            fixed::rope(head, &cos, &sin);
        }
        cache.push((k.to_vec(), v.to_vec()));
        let mut attn = vec![0; c.q_rows()];
        let at = |p: usize, h: usize, which: usize| {
            let (k, v) = &cache[p];
            &[k, v][which][h * hd..(h + 1) * hd]
        };
        fixed::attention(q, c.heads(), pos + 1, |p, h| at(p, h, 0), |p, h| at(p, h, 1), &mut attn);
        let mut o = vec![0; c.hidden];
        fixed::matvec(&self.o, &attn, &mut o);
        fixed::add(x, &o);

        fixed::rms_norm(x, &self.post_norm, eps, &mut h);
        let mut gate_up = vec![0; 2 * c.intermediate];
        fixed::matvec(&self.gate_up, &h, &mut gate_up);
        let (gate, up) = gate_up.split_at_mut(c.intermediate);
        fixed::silu_mul(gate, up);
        let mut down = vec![0; c.hidden];
        fixed::matvec(&self.down, gate, &mut down);
        fixed::add(x, &down);
    }
}

impl Model {
    /// The next-token logits (Q16) after `token` at `pos` (positions 0..pos are in `cache`).
    pub fn forward(&self, token: usize, pos: usize, cache: &mut Cache) -> Step {
        let c = &self.config;
        if cache.layers.len() != c.layers {
            cache.layers = vec![Vec::new(); c.layers];
        }
        let mut x = self.embed[token * c.hidden..(token + 1) * c.hidden].to_vec();
        for (layer, kv) in self.layers.iter().zip(&mut cache.layers) {
            layer.forward(c, &mut x, pos, kv);
        }
        let mut h = vec![0; c.hidden];
        fixed::rms_norm(&x, &self.final_norm, c.eps_q32(), &mut h);
        let mut logits = vec![0; c.vocab];
        let argmax = fixed::matvec(&self.lm_head, &h, &mut logits);
        Step { logits, argmax }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn the_tiny_model_runs_deterministically_and_uses_its_cache() {
        let m = Model::from_float(Config::TINY, &Model::random_float(Config::TINY, 1)).unwrap();
        let run = |tokens: &[usize]| {
            let mut cache = Cache::default();
            tokens.iter().enumerate().map(|(p, &t)| m.forward(t, p, &mut cache)).collect::<Vec<_>>()
        };
        let a = run(&[1, 2, 3]);
        assert_eq!(a, run(&[1, 2, 3]));
        // The same last token after a different history gives different logits: attention reads
        // the cache.
        assert_ne!(a[2].logits, run(&[4, 2, 3])[2].logits);
        assert!(a.iter().all(|s| s.logits[s.argmax] == *s.logits.iter().max().unwrap()));
    }

    #[test]
    fn out_of_range_weights_name_their_tensor() {
        let mut f = Model::random_float(Config::TINY, 2);
        f.layers[1].down[7] = f32::INFINITY;
        let err = Model::from_float(Config::TINY, &f).unwrap_err();
        assert_eq!(err.tensor, "layers.1.mlp.down_proj");
        assert_eq!(err.source.index, 7);
        f.layers[1].down[7] = 0.0;
        f.layers[0].q_norm[3] = 5000.0; // 5000 · 2^20 does not fit 32 bits
        assert_eq!(Model::from_float(Config::TINY, &f).unwrap_err().tensor, "layers.0.self_attn.q_norm");
    }
}
