//! The second machine spliced into a text model (issue #22, first step): one residual stream
//! shared by the machine's compiled layers and a llama-family model (SmolLM2-135M), one
//! vocabulary (the text's tokens, then the machine's VAL and record tokens, `machine_tokens`),
//! one forward pass. What the splice must not do is change the text: at a text position the
//! spliced model's text logits are the plain model's, bit for bit, and the machine tokens take
//! no probability.
//!
//! **The stream.** `width = 4 · hidden`: the text's channels first, then the §2 bias channel,
//! then the machine's. The text model's tensors read and write only its own channels (its
//! matrices are the original ones with zero columns and rows for the machine's). A text token's
//! embedding has zeros in every machine channel, a machine token's zeros in every text channel.
//!
//! **Why the text is unchanged.** At a text position the machine's channels are zero, so:
//! - every RMSNorm's sum of squares over `width` channels is the text's own (adding `+0` changes
//!   no partial sum, `text::dot`), and the mean is the text's divided by exactly 4. With
//!   `ε/4` and the text's norm weights halved, `x · (1/√((m + ε)/4)) · (w/2)` is `x · (1/√(m + ε))
//!   · w` bit for bit: every step only scales by a power of two, which commutes with rounding;
//! - the machine's layers (in front of the text's) read only machine channels and the bias, all
//!   zero: every pre-activation is 0, `silu(0) · 0` is 0, and they write nothing;
//! - the machine tokens must still lose, although every channel their head rows read is 0
//!   there. So a text token's embedding also writes a **text flag** `τ = 2^−40` into the
//!   stream's last channel. Its square, 2^−80, vanishes in every norm's sum of squares (it is far
//!   below half an ulp of any real activation's square in its lane), so it changes no text bit.
//!   The final norm weighs the flag `2^100` and every machine head row reads it with weight −1:
//!   a machine logit at a text position is about `−2^60 / rms`, and its `exp` is exactly 0. At a
//!   machine position the flag is 0 and adds nothing.
//!
//! **Why the machine works at its positions.** The bias `2^29 · √width` makes every norm's root
//! exactly `2^29` (§2), which needs `√width` exact: `hidden` must be a perfect square (576 = 24²).
//! The machine's channels get the norm weight `2^29`, the bias `1/√width`, so they come back as
//! the integers they are. The text layers see a stream scaled by 2^−29 and write nonsense into
//! the text channels only, which the machine head outweighs (`machine_tokens`).
//!
//! **What the machine is, so far.** One feed layer and one lane's ALU (`limb_alu`): a VAL token
//! `v` puts `a = v` and `b = v · 2^16` on the ALU's operands, and all 25 results appear in the
//! stream. The sequencer and the register rows are not built yet, so a machine position's argmax
//! is the token its channels already name (a VAL token's successor is itself).

pub mod drift;
pub mod text;

use super::limb_alu::{AluStack, Op};
use super::limbs::{Layer, LIMBS, M};
use super::machine_tokens::{Token, Vocab};
use crate::qwen3::model::{Config, FloatModel};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpliceError {
    #[error("the splice needs a hidden size that is a perfect square (so the bias channel's norm is exact); this model's is {0}")]
    Hidden(usize),
    #[error("the machine needs {need} channels; a stream of 4 × {hidden} leaves {have} beside the text")]
    Narrow { need: usize, hidden: usize, have: usize },
    #[error("token {token} is outside the vocabulary ({vocab} tokens)")]
    Token { token: usize, vocab: usize },
    #[error("the text model does not match its config: {0}")]
    Shape(String),
}

/// The text flag a text token's embedding writes, and the final norm's weight on it.
pub const FLAG: f32 = 1.0 / (1u64 << 40) as f32;
pub const FLAG_WEIGHT: f32 = (1u128 << 100) as f32;

/// The machine's part of a spliced model, for the text model `text`.
#[derive(Debug, Clone)]
pub struct Splice {
    pub text: Config,
    /// Channels of the shared stream (`4 · hidden`).
    pub width: usize,
    /// The §2 bias channel: the first after the text's.
    pub bias: usize,
    /// The text flag's channel (the stream's last), and the value a text token writes there.
    pub flag: usize,
    pub flag_value: f32,
    pub vocab: Vocab,
    /// The machine's layers on the shared stream, in front of the text's.
    pub layers: Vec<Layer>,
    /// The ALU's operands (limbs from these channels) and each operation's result.
    pub alu_a: usize,
    pub alu_b: usize,
    pub alu_results: Vec<(Op, usize)>,
    /// Every machine token's embedding and unembedding row (sparse), by machine id.
    pub embed: Vec<Vec<(usize, f32)>>,
    pub head: Vec<Vec<(usize, f32)>>,
}

/// The norm weights of a spliced model's stream (`width` each) and its ε.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamNorms {
    pub input: Vec<Vec<f32>>,
    pub post: Vec<Vec<f32>>,
    pub last: Vec<f32>,
    /// The compiled layers' (§2's).
    pub machine: Vec<f32>,
    pub eps: f32,
}

/// What a spliced model holds, for the CLIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub machine_layers: usize,
    pub text_layers: usize,
    pub width: usize,
    pub machine_channels: usize,
    pub hidden_units: usize,
    pub nonzero: usize,
    /// The machine layers' weights as dense matrices (gate, up and down over the whole stream).
    pub dense: usize,
    pub text_vocab: usize,
    pub machine_vocab: usize,
}

impl Splice {
    pub fn new(text: Config) -> Result<Splice, SpliceError> {
        let h = text.hidden;
        let root = (h as f64).sqrt() as usize;
        if root * root != h {
            return Err(SpliceError::Hidden(h));
        }
        let width = 4 * h;
        let alu = AluStack::build();
        // The ALU's own stream: channel 0 its bias, then its channels; the vocabulary's after.
        let local_vocab = Vocab::at(alu.channels);
        let need = alu.channels + local_vocab.channels().len() + 1;
        if need > width - h {
            return Err(SpliceError::Narrow { need, hidden: h, have: width - h });
        }
        // The feed: a VAL token's limbs to the low limbs of `a` and the high limbs of `b`.
        let mut feed = Layer::default();
        for (i, f) in local_vocab.val.iter().enumerate() {
            feed.pass(&[(f.channel, 1.0)], &[(alu.a + i, 1.0), (alu.b + 2 + i, 1.0)]);
        }
        let layers = core::iter::once(&feed).chain(&alu.layers).map(|l| l.shifted(h)).collect();
        let vocab = Vocab::on(h + alu.channels, h);
        let flag = width - 1;
        let tokens: Vec<Token> = (0..vocab.len()).filter_map(|id| vocab.token(id)).collect();
        let embed = tokens.iter().map(|&t| vocab.embedding(width, t)).collect();
        let head = tokens
            .iter()
            .map(|&t| {
                let mut row = vocab.head_row(t);
                row.push((flag, -1.0));
                row
            })
            .collect();
        let alu_results = alu.results.iter().map(|&(op, c)| (op, c + h)).collect();
        let (alu_a, alu_b) = (alu.a + h, alu.b + h);
        Ok(Splice {
            text,
            width,
            bias: h,
            flag,
            flag_value: FLAG,
            vocab,
            layers,
            alu_a,
            alu_b,
            alu_results,
            embed,
            head,
        })
    }

    /// Text tokens, then machine tokens.
    pub fn vocab_size(&self) -> usize {
        self.text.vocab + self.vocab.len()
    }

    /// The machine token with id `id` in the spliced vocabulary.
    pub fn machine_token(&self, id: usize) -> Option<Token> {
        id.checked_sub(self.text.vocab).and_then(|m| self.vocab.token(m))
    }

    pub fn token_id(&self, t: Token) -> usize {
        self.text.vocab + self.vocab.id(t)
    }

    /// The ALU's operands for VAL token `v` (the feed layer's wiring).
    pub fn alu_operands(v: u16) -> (u32, u32) {
        (u32::from(v), u32::from(v) << 16)
    }

    pub fn sizes(&self) -> Sizes {
        let (hidden_units, nonzero) =
            self.layers.iter().map(Layer::size).fold((0, 0), |(u, n), (lu, ln)| (u + lu, n + ln));
        Sizes {
            machine_layers: self.layers.len(),
            text_layers: self.text.layers,
            width: self.width,
            machine_channels: self.width - self.text.hidden,
            hidden_units,
            nonzero,
            dense: 3 * hidden_units * self.width,
            text_vocab: self.text.vocab,
            machine_vocab: self.vocab.len(),
        }
    }

    /// The stream's norms for the text model `model`: the text's halved (a mean over four times
    /// the channels), §2's for the compiled layers, the flag's huge weight in the final one, ε/4.
    pub fn norms(&self, model: &FloatModel) -> StreamNorms {
        StreamNorms {
            input: model.layers.iter().map(|l| self.text_norm(&l.input_norm)).collect(),
            post: model.layers.iter().map(|l| self.text_norm(&l.post_norm)).collect(),
            last: self.final_norm(&model.final_norm),
            machine: self.machine_norm(),
            eps: self.text.rms_eps as f32 / 4.0,
        }
    }

    /// That every channel the machine names lies in the stream, and every machine token has its
    /// rows (a loaded checkpoint may not).
    pub fn check(&self) -> Result<(), SpliceError> {
        let w = self.width;
        let bad = |what: String| Err(SpliceError::Shape(what));
        if self.embed.len() != self.vocab.len() || self.head.len() != self.vocab.len() {
            return bad(alloc::format!(
                "{} machine tokens but {} embedding and {} head rows",
                self.vocab.len(),
                self.embed.len(),
                self.head.len()
            ));
        }
        let rows = self.embed.iter().chain(&self.head).flatten();
        let units = self.layers.iter().flat_map(|l| &l.units);
        let weights = units.flat_map(|u| u.gate.iter().chain(&u.up).chain(&u.down));
        let mut channels = rows.chain(weights).map(|&(c, _)| c);
        let mut named =
            [self.bias, self.flag, self.vocab.bias, self.vocab.kind, self.alu_a + LIMBS - 1, self.alu_b + LIMBS - 1]
                .into_iter()
                .chain(self.vocab.val.iter().chain(&self.vocab.record).map(|f| f.channel))
                .chain(self.alu_results.iter().map(|&(_, c)| c + LIMBS - 1));
        match (channels.find(|&c| c >= w), named.find(|&c| c >= w)) {
            (None, None) => Ok(()),
            (Some(c), _) | (None, Some(c)) => bad(alloc::format!("channel {c} lies outside the stream of {w}")),
        }
    }

    /// Norm weights of the machine's layers: §2's on the bias and the machine's channels.
    fn machine_norm(&self) -> Vec<f32> {
        let mut w = vec![0.0; self.width];
        w[self.bias] = 1.0 / (self.width as f32).sqrt();
        w[self.bias + 1..self.flag].fill(2f32.powi(M));
        w
    }

    /// A text norm's weights on the stream: halved (the mean is over four times the channels).
    fn text_norm(&self, w: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; self.width];
        for (o, w) in out.iter_mut().zip(w) {
            *o = w / 2.0;
        }
        out
    }

    /// The final norm's weights: the text's halved, §2's on the machine's channels, and the
    /// flag's huge one.
    fn final_norm(&self, w: &[f32]) -> Vec<f32> {
        let mut out = self.machine_norm();
        out[self.flag] = FLAG_WEIGHT;
        for (o, w) in out.iter_mut().zip(w) {
            *o = w / 2.0;
        }
        out
    }
}

/// A forward pass with its KV cache: of the plain text model, or of the spliced one.
pub struct Runner<'a> {
    config: Config,
    model: &'a FloatModel,
    splice: Option<&'a Splice>,
    width: usize,
    eps: f32,
    input_norms: Vec<Vec<f32>>,
    post_norms: Vec<Vec<f32>>,
    final_norm: Vec<f32>,
    machine_norm: Vec<f32>,
    order: Vec<usize>,
    /// Per layer, every position's keys (then values), `kv_rows` each.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    /// The stream after the machine's layers at the last position (spliced only).
    pub machine_stream: Vec<f32>,
}

impl<'a> Runner<'a> {
    /// The text model as it is.
    pub fn plain(config: Config, model: &'a FloatModel) -> Result<Self, SpliceError> {
        check(&config, model)?;
        Ok(Runner {
            config,
            model,
            splice: None,
            width: config.hidden,
            eps: config.rms_eps as f32,
            input_norms: model.layers.iter().map(|l| l.input_norm.clone()).collect(),
            post_norms: model.layers.iter().map(|l| l.post_norm.clone()).collect(),
            final_norm: model.final_norm.clone(),
            machine_norm: Vec::new(),
            order: Vec::new(),
            keys: vec![Vec::new(); config.layers],
            values: vec![Vec::new(); config.layers],
            machine_stream: Vec::new(),
        })
    }

    /// The text model with `splice` in it.
    pub fn spliced(config: Config, model: &'a FloatModel, splice: &'a Splice) -> Result<Self, SpliceError> {
        Runner::spliced_with(config, model, splice, splice.norms(model))
    }

    /// [`Self::spliced`] with the stream's norms given (as a checkpoint stores them).
    pub fn spliced_with(
        config: Config,
        model: &'a FloatModel,
        splice: &'a Splice,
        norms: StreamNorms,
    ) -> Result<Self, SpliceError> {
        splice.check()?;
        let w = splice.width;
        let wrong = norms.input.iter().chain(&norms.post).chain([&norms.last, &norms.machine]).any(|n| n.len() != w);
        if norms.input.len() != config.layers || norms.post.len() != config.layers || wrong {
            return Err(SpliceError::Shape(alloc::format!(
                "the stream's norms are not {} layers of {w} weights",
                config.layers
            )));
        }
        let mut r = Runner::plain(config, model)?;
        (r.input_norms, r.post_norms, r.final_norm, r.machine_norm) =
            (norms.input, norms.post, norms.last, norms.machine);
        (r.order, r.eps, r.width, r.splice) = ((0..w).collect(), norms.eps, w, Some(splice));
        Ok(r)
    }

    pub fn vocab_size(&self) -> usize {
        self.splice.map_or(self.config.vocab, Splice::vocab_size)
    }

    /// Positions run so far.
    pub fn position(&self) -> usize {
        self.keys[0].len() / self.config.kv_rows()
    }

    /// Forgets every position.
    pub fn reset(&mut self) {
        self.keys.iter_mut().chain(&mut self.values).for_each(Vec::clear);
    }

    /// The next token's logits (text tokens first) after `token`.
    pub fn forward(&mut self, token: usize) -> Result<Vec<f32>, SpliceError> {
        Ok(self.forward_many(&[token])?.pop().unwrap_or_default())
    }

    /// [`Self::forward`] for consecutive tokens at once, each position's logits: every product
    /// is the one `forward` computes (so the bits are the same), but a weight row is read once for
    /// all of them.
    pub fn forward_many(&mut self, tokens: &[usize]) -> Result<Vec<Vec<f32>>, SpliceError> {
        let (c, h) = (self.config, self.config.hidden);
        let mut xs = Vec::with_capacity(tokens.len());
        for &token in tokens {
            let mut x = vec![0.0f32; self.width];
            match self.splice {
                _ if token < c.vocab => {
                    x[..h].copy_from_slice(&self.model.embed[token * h..][..h]);
                    if let Some(s) = self.splice {
                        x[s.flag] = s.flag_value;
                    }
                }
                Some(s) => {
                    let row =
                        s.embed.get(token - c.vocab).ok_or(SpliceError::Token { token, vocab: s.vocab_size() })?;
                    for &(ch, v) in row {
                        x[ch] = v;
                    }
                }
                None => return Err(SpliceError::Token { token, vocab: c.vocab }),
            }
            if let Some(s) = self.splice {
                for l in &s.layers {
                    l.forward_with(&mut x, &self.machine_norm, self.eps, &self.order);
                }
                self.machine_stream.clone_from(&x);
            }
            xs.push(x);
        }
        let start = self.position();
        let tables: Vec<_> = (0..xs.len()).map(|t| text::rope_table(c.rope_theta, c.head_dim, start + t)).collect();
        for i in 0..c.layers {
            self.text_layer(i, &mut xs, &tables);
        }
        let ns: Vec<Vec<f32>> = xs.iter().map(|x| text::rms_norm(x, &self.final_norm, self.eps)).collect();
        let mut logits = vec![text::zeros(self.vocab_size()); xs.len()];
        let heads: Vec<&mut [f32]> = logits.iter_mut().map(|l| &mut l[..c.vocab]).collect();
        text::matmul(self.model.lm_head(), &text_part(&ns, h), heads);
        if let Some(s) = self.splice {
            for (l, n) in logits.iter_mut().zip(&ns) {
                for (l, row) in l[c.vocab..].iter_mut().zip(&s.head) {
                    *l = row.iter().fold(0.0f32, |acc, &(ch, w)| acc + w * n[ch]);
                }
            }
        }
        Ok(logits)
    }

    /// Decoder layer `i` (the reference's steps) on the text's channels of each position's `x`.
    fn text_layer(&mut self, i: usize, xs: &mut [Vec<f32>], tables: &[Vec<(f32, f32)>]) {
        let (c, l) = (self.config, &self.model.layers[i]);
        let (h, hd, n) = (c.hidden, c.head_dim, xs.len());
        let normed: Vec<Vec<f32>> = xs.iter().map(|x| text::rms_norm(x, &self.input_norms[i], self.eps)).collect();
        let inputs = text_part(&normed, h);
        let (mut q, mut k, mut v) = (outputs(n, c.q_rows()), outputs(n, c.kv_rows()), outputs(n, c.kv_rows()));
        text::matmul(&l.q, &inputs, q.iter_mut().map(|v| &mut v[..]).collect());
        text::matmul(&l.k, &inputs, k.iter_mut().map(|v| &mut v[..]).collect());
        text::matmul(&l.v, &inputs, v.iter_mut().map(|v| &mut v[..]).collect());
        let first = self.keys[i].len();
        for t in 0..n {
            let (q, k, v) = (&mut q[t], &mut k[t], &mut v[t]);
            if c.qkv_bias {
                for (out, bias) in [(&mut *q, &l.q_bias), (&mut *k, &l.k_bias), (&mut *v, &l.v_bias)] {
                    out.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
                }
            }
            for (heads, norm) in [(&mut *q, &l.q_norm), (&mut *k, &l.k_norm)] {
                for head in heads.chunks_exact_mut(hd) {
                    if c.qk_norm {
                        // Per head, over head_dim: the stream's width does not enter.
                        let normed = text::rms_norm(head, norm, c.rms_eps as f32);
                        head.copy_from_slice(&normed);
                    }
                    text::rope(head, &tables[t]);
                }
            }
            self.keys[i].extend_from_slice(k);
            self.values[i].extend_from_slice(v);
        }
        let group = c.heads / c.kv_heads;
        let mut attn = outputs(n, c.q_rows());
        for (t, out) in attn.iter_mut().enumerate() {
            // Causal: position t sees the cache up to itself.
            let end = first + (t + 1) * c.kv_rows();
            let (keys, values) = (&self.keys[i][..end], &self.values[i][..end]);
            for (head, out) in out.chunks_exact_mut(hd).enumerate() {
                text::attend(&q[t][head * hd..][..hd], keys, values, c.kv_rows(), head / group * hd, out);
            }
        }
        let mut o = outputs(n, h);
        text::matmul(
            &l.o,
            &attn.iter().map(|a| &a[..]).collect::<Vec<_>>(),
            o.iter_mut().map(|v| &mut v[..]).collect(),
        );
        add_text(xs, &o);
        let normed: Vec<Vec<f32>> = xs.iter().map(|x| text::rms_norm(x, &self.post_norms[i], self.eps)).collect();
        let inputs = text_part(&normed, h);
        let (mut gate, mut up) = (outputs(n, c.intermediate), outputs(n, c.intermediate));
        text::matmul(&l.gate, &inputs, gate.iter_mut().map(|v| &mut v[..]).collect());
        text::matmul(&l.up, &inputs, up.iter_mut().map(|v| &mut v[..]).collect());
        let act: Vec<Vec<f32>> = gate.iter().zip(&up).map(|(g, u)| text::swiglu(g, u)).collect();
        text::matmul(
            &l.down,
            &act.iter().map(|a| &a[..]).collect::<Vec<_>>(),
            o.iter_mut().map(|v| &mut v[..]).collect(),
        );
        add_text(xs, &o);
    }
}

/// Each row's first `h` values (the text's channels).
fn text_part(rows: &[Vec<f32>], h: usize) -> Vec<&[f32]> {
    rows.iter().map(|r| &r[..h]).collect()
}

fn outputs(n: usize, len: usize) -> Vec<Vec<f32>> {
    vec![text::zeros(len); n]
}

/// The residual add of a text sublayer's outputs to the text's channels.
fn add_text(xs: &mut [Vec<f32>], out: &[Vec<f32>]) {
    for (x, o) in xs.iter_mut().zip(out) {
        x.iter_mut().zip(o).for_each(|(x, o)| *x += o);
    }
}

/// That every tensor has its config's size (a model read from a file may not).
fn check(c: &Config, m: &FloatModel) -> Result<(), SpliceError> {
    let bad = |what: &str, got: usize, want: usize| {
        Err(SpliceError::Shape(alloc::format!("{what} has {got} values, the config says {want}")))
    };
    if m.layers.len() != c.layers {
        return bad("the layer list", m.layers.len(), c.layers);
    }
    for (what, got, want) in [
        ("the embedding", m.embed.len(), c.vocab * c.hidden),
        ("the LM head", m.lm_head().len(), c.vocab * c.hidden),
        ("the final norm", m.final_norm.len(), c.hidden),
    ] {
        if got != want {
            return bad(what, got, want);
        }
    }
    for l in &m.layers {
        for (t, shape, data) in l.tensors(c) {
            let want: usize = shape.iter().product();
            if data.len() != want {
                return bad(t.names().0, data.len(), want);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
