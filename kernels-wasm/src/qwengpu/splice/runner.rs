//! The spliced model's forward pass (and the plain text model's, for the drift): the compiled
//! layers in front, then the text's decoder layers on the text's channels, then both heads.
//!
//! **What a machine position leaves out.** At a machine token's position the text's decoder
//! layers and the text head are not run, and its text logits are returned as 0. Nothing the
//! model chooses depends on them:
//! - the text layers read and write only the text's channels, and no machine head row reads
//!   one (`splice`);
//! - the final norm's root at a machine position is exactly `2^29` whatever the text channels
//!   hold, as long as their squares stay below half an ulp of the bias channel's (§2): there the
//!   text layers only mix the text positions' values into channels that start at 0, so every
//!   machine logit is the same bit for bit;
//! - a text position attends to text positions only (§20), so no later position reads a machine
//!   position's keys and values;
//! - what is left, the text tokens' logits at a machine position, is the text head applied to
//!   the text channels divided by the norm's `2^29`, against a winning machine logit above
//!   `2^20` (`machine_tokens::LIFT`): their probability is exactly 0 in f32 either way, and the
//!   argmax is the same.
//!
//! The dense check of a written checkpoint (`native-host/tests/qwengpu_dense.rs`) runs every
//! layer at every position and picks the same tokens. A machine position used to attend to every
//! position before it, so a launch's cost grew with the context: 82 % of the whole-suite test's
//! time was that attention and the text head's 49,152 × 576 product (perf, 2026-12-07).

use super::head::PackedHead;
use super::{text, Compiled, Splice, SpliceError, StreamNorms};
use crate::qwen3::model::{Config, FloatModel};
use crate::qwengpu::awake::{Schedule, Scratch};
use crate::qwengpu::deltanet::{DeltaNet, DeltaNetWeights, Tape};
use crate::qwengpu::limbs::rms_norm_into;
use alloc::vec;
use alloc::vec::Vec;

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
    /// The channels' own order, in which the norms sum their squares (`None` to the scheduled
    /// layers says the same).
    order: Vec<usize>,
    /// Per layer, the text positions' keys (then values), `kv_rows` each: all a text position
    /// attends to (§20).
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    /// Text tokens run so far: the RoPE position of the next token.
    text_positions: usize,
    /// Positions run so far, text and machine.
    positions: usize,
    /// Per compiled DeltaNet layer, its recurrent state and the channels it writes (`None` for
    /// the SwiGLU layers).
    states: Vec<Option<(DeltaNet, Vec<usize>)>>,
    /// Per compiled SwiGLU layer, which units can fire given the nonzero channels (`awake`).
    schedules: Vec<Option<Schedule>>,
    /// Per compiled layer asked for ([`Self::record_streams`]): the stream before it and after
    /// it at each machine position.
    stream_tapes: Vec<(usize, Tape, Tape)>,
    /// The compiled layers' buffers, kept between layers and positions.
    scratch: Scratch,
    /// The machine tokens' head rows, packed (`head`; spliced only).
    machine_head: Option<PackedHead>,
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
            text_positions: 0,
            positions: 0,
            states: Vec::new(),
            schedules: Vec::new(),
            stream_tapes: Vec::new(),
            scratch: Scratch::default(),
            machine_head: None,
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
        // The bias channel normed at a machine position, and at a text position (0).
        let machine_bias = splice.machine_bias(&norms);
        let mut r = Runner::plain(config, model)?;
        (r.input_norms, r.post_norms, r.final_norm, r.machine_norm) =
            (norms.input, norms.post, norms.last, norms.machine);
        (r.order, r.eps, r.width, r.splice) = ((0..w).collect(), norms.eps, w, Some(splice));
        r.machine_head = Some(PackedHead::new(&splice.head));
        r.schedules = splice
            .layers
            .iter()
            .map(|l| match l {
                Compiled::SwiGlu(l) => Some(Schedule::new(l, w, splice.bias, &[machine_bias, 0.0])),
                Compiled::DeltaNet(_) => None,
            })
            .collect();
        r.reset();
        Ok(r)
    }

    pub fn vocab_size(&self) -> usize {
        self.splice.map_or(self.config.vocab, Splice::vocab_size)
    }

    /// Positions run so far.
    pub fn position(&self) -> usize {
        self.positions
    }

    /// The recurrent state of compiled layer `i`, if it is a Gated DeltaNet.
    pub fn deltanet(&self, i: usize) -> Option<&DeltaNet> {
        self.states.get(i)?.as_ref().map(|(net, _)| net)
    }

    /// Has every compiled DeltaNet count where its non-linear steps' arguments lie from now on
    /// (`deltanet::Regimes`, read back through [`Self::deltanet`]).
    pub fn watch_regimes(&mut self) {
        self.states.iter_mut().flatten().for_each(|(net, _)| net.watch());
        self.scratch.gates_outside.get_or_insert(0);
    }

    /// Has every compiled DeltaNet record its inputs from now on (`deltanet::Tape`, read back
    /// through [`Self::deltanet`]).
    pub fn record_deltanets(&mut self) {
        self.states.iter_mut().flatten().for_each(|(net, _)| net.record());
    }

    /// Records, from now on, the stream before and after each compiled layer of `layers` at every
    /// machine position (read back through [`Self::stream_tape`]): a GPU port's test replays it.
    pub fn record_streams(&mut self, layers: &[usize]) {
        self.stream_tapes = layers.iter().map(|&l| (l, Tape::default(), Tape::default())).collect();
    }

    /// The streams recorded before and after compiled layer `layer`.
    pub fn stream_tape(&self, layer: usize) -> Option<(&Tape, &Tape)> {
        self.stream_tapes.iter().find(|t| t.0 == layer).map(|(_, before, after)| (before, after))
    }

    /// The machine layers' norm weights and ε.
    pub fn machine_norm(&self) -> (&[f32], f32) {
        (&self.machine_norm, self.eps)
    }

    /// Since [`Self::watch_regimes`]: the SwiGLU gates evaluated whose SiLU needed `exp`.
    pub fn swiglu_gates_outside(&self) -> Option<u64> {
        self.scratch.gates_outside
    }

    /// Forgets every position.
    pub fn reset(&mut self) {
        self.keys.iter_mut().chain(&mut self.values).for_each(Vec::clear);
        (self.text_positions, self.positions) = (0, 0);
        if let Some(s) = self.splice {
            self.states = s
                .layers
                .iter()
                .map(|l| match l {
                    Compiled::DeltaNet(w) => Some((DeltaNet::new((**w).clone()), written(w))),
                    Compiled::SwiGlu(_) => None,
                })
                .collect();
        }
    }

    /// The next token's logits (text tokens first) after `token`.
    pub fn forward(&mut self, token: usize) -> Result<Vec<f32>, SpliceError> {
        Ok(self.forward_many(&[token])?.pop().unwrap_or_default())
    }

    /// [`Self::forward`] for consecutive tokens at once, each position's logits: every product
    /// is the one `forward` computes (so the bits are the same), but a weight row is read once for
    /// all of them.
    pub fn forward_many(&mut self, tokens: &[usize]) -> Result<Vec<Vec<f32>>, SpliceError> {
        self.run(tokens, 0)
    }

    /// [`Self::forward_many`] when only the last position's logits are wanted (a prompt the host
    /// feeds): the heads, a matrix product over the whole vocabulary, run once.
    pub fn forward_last(&mut self, tokens: &[usize]) -> Result<Vec<f32>, SpliceError> {
        Ok(self.run(tokens, tokens.len().saturating_sub(1))?.pop().unwrap_or_default())
    }

    /// The positions of `tokens`, and the logits of those from `heads_from` on.
    fn run(&mut self, tokens: &[usize], heads_from: usize) -> Result<Vec<Vec<f32>>, SpliceError> {
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
                for (i, ((l, state), schedule)) in
                    s.layers.iter().zip(&mut self.states).zip(&self.schedules).enumerate()
                {
                    let mut tape = self.stream_tapes.iter_mut().find(|t| t.0 == i);
                    if let Some((_, before, _)) = &mut tape {
                        before.push(&x);
                    }
                    match (l, state) {
                        (_, Some((net, written))) => {
                            rms_norm_into(&x, &self.machine_norm, self.eps, None, &mut self.scratch.n);
                            let y = net.step(&self.scratch.n);
                            for &c in written.iter() {
                                x[c] += y[c];
                            }
                        }
                        (Compiled::SwiGlu(l), None) => match schedule {
                            Some(sc) => {
                                l.forward_scheduled(sc, &mut self.scratch, &mut x, &self.machine_norm, self.eps, None)
                            }
                            None => l.forward_with(&mut x, &self.machine_norm, self.eps, &self.order),
                        },
                        (Compiled::DeltaNet(_), None) => {}
                    }
                    if let Some((_, _, after)) = tape {
                        after.push(&x);
                    }
                }
                self.machine_stream.clone_from(&x);
            }
            xs.push(x);
        }
        // The text's layers and head run at the text positions alone (the module docs say why),
        // each at its RoPE position: only text tokens take one, so the text around a launch is
        // positioned as if the launch were not there.
        let texts: Vec<usize> = (0..tokens.len()).filter(|&t| tokens[t] < c.vocab).collect();
        let tables: Vec<_> =
            (0..texts.len()).map(|k| text::rope_table(c.rope_theta, c.head_dim, self.text_positions + k)).collect();
        let mut text_xs: Vec<Vec<f32>> = texts.iter().map(|&t| core::mem::take(&mut xs[t])).collect();
        for i in 0..c.layers {
            self.text_layer(i, &mut text_xs, &tables);
        }
        for (&t, x) in texts.iter().zip(text_xs) {
            xs[t] = x;
        }
        self.text_positions += texts.len();
        self.positions += tokens.len();
        let ns: Vec<Vec<f32>> =
            xs.iter().skip(heads_from).map(|x| text::rms_norm(x, &self.final_norm, self.eps)).collect();
        let mut logits = vec![text::zeros(self.vocab_size()); ns.len()];
        let (mut heads, mut inputs) = (Vec::new(), Vec::new());
        for ((l, n), &token) in logits.iter_mut().zip(&ns).zip(&tokens[heads_from..]) {
            if token < c.vocab {
                heads.push(&mut l[..c.vocab]);
                inputs.push(&n[..h]);
            }
        }
        text::matmul(self.model.lm_head(), &inputs, heads);
        if let Some(head) = &self.machine_head {
            for (l, n) in logits.iter_mut().zip(&ns) {
                head.logits(n, &mut l[c.vocab..]);
            }
        }
        Ok(logits)
    }

    /// Decoder layer `i` (the reference's steps) on the text's channels of each text position's
    /// `x`.
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
            // Causal: position t sees the cache up to itself, the text positions alone (§20), so
            // the machine's tokens take none of its attention and a conversation's text runs as
            // the plain model would run it.
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

/// The channels a DeltaNet adds its output to: the rows of `w_out` that are not all zero (only
/// those change, so a text channel never picks up a −0).
fn written(w: &DeltaNetWeights) -> Vec<usize> {
    w.w_out.nonzero_rows()
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
