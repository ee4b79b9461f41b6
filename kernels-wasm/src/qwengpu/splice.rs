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
//! **What the machine is, so far.** The slot counter (which VAL token of its step a position is),
//! the register file (the step's block, its ROM words and a lane's 15 registers, loaded at the
//! lane's first position), the executor (`exec`: the block's four instructions run on those
//! registers, 14 SwiGLU layers each) and the results row (`results`): at every position of a
//! step whose next slot is set, the model's argmax is that slot's VAL token; and the PC rows
//! (`pc_rows`): each lane's next PC, written at the step's record and at each lane's start; and
//! the next record read from them (`next_record`): at a step's last position the argmax is the
//! next step's record, or `next_record::END` after the launch's last step, and after the
//! prompt the launch's first record.

pub mod chat;
pub mod drift;
mod head;
pub mod launch;
mod rows;
mod runner;
pub mod text;

pub use rows::{RowLayers, SentRegisters};
pub use runner::Runner;

use super::deltanet::DeltaNetWeights;
use super::exec::Exec;
use super::isa::MachineSpec;
use super::limbs::{Layer, M};
use super::machine_tokens::{Token, Vocab};
use super::next_record::NextRecord;
use super::pc_rows::PcRows;
use super::register_file::{shared_groups, RegisterFile, Shape};
use super::results::Results;
use super::slot_counter::Counter;
use crate::qwen3::model::{Config, FloatModel};
use alloc::boxed::Box;
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

/// Slots of a step's tokens: the record is slot 0, and a block's worst case is a store in each of
/// its 4 instructions, three VAL tokens each for each of 4 lanes, 48 (`register_file::Shape`).
pub const SLOTS: usize = 49;

/// A tiny llama that can be spliced (for tests): SmolLM2's width, hidden 576 = 24² (9 heads of
/// 64, 3 KV heads), so the stream of 2,304 channels leaves the machine the 1,728 beside the text.
pub const TINY_TEXT: Config = Config { hidden: 576, heads: 9, kv_heads: 3, ..Config::TINY_FAMILY[1].1 };

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
    /// The machine's sublayers on the shared stream, in front of the text's. A Gated DeltaNet
    /// and the SwiGLU MLP after it are one decoder layer (Qwen3.5's token mixer and MLP); an MLP
    /// with no DeltaNet before it is a decoder layer whose mixer writes nothing.
    pub layers: Vec<Compiled>,
    /// The one-hot slot of a VAL token in its step (`slot_counter`): `slots` channels from `slot`.
    pub slot: usize,
    pub slots: usize,
    /// The step's record (warp, block, mask) at every position of the step: 3 channels.
    pub step_record: usize,
    /// The live-out table and the register rows (`register_file`).
    pub registers: RegisterFile,
    /// The executor of a lane's block (`exec`), on the registers the file loads.
    pub exec: Exec,
    /// The results row and the output that names the next slot's token (`results`).
    pub results: Results,
    /// Each lane's PC (`pc_rows`), and the next record read from them (`next_record`).
    pub pcs: PcRows,
    pub next: NextRecord,
    /// Every machine token's embedding and unembedding row (sparse), by machine id.
    pub embed: Vec<Vec<(usize, f32)>>,
    pub head: Vec<Vec<(usize, f32)>>,
}

/// A compiled layer of the shared stream, pre-norm with §2's weights.
#[derive(Debug, Clone)]
pub enum Compiled {
    SwiGlu(Layer),
    /// Its output goes to the channels its `w_out` writes (rows of `d_model = width`).
    DeltaNet(Box<DeltaNetWeights>),
}

impl Compiled {
    /// Hidden units (a DeltaNet's: its heads' value channels) and nonzero weights.
    pub fn size(&self) -> (usize, usize) {
        match self {
            Compiled::SwiGlu(l) => l.size(),
            Compiled::DeltaNet(w) => (w.heads * w.d_v, w.nonzero()),
        }
    }
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

/// What a spliced model holds, for the CLIs (`Display` prints it in two lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Compiled decoder layers: each a token mixer (a Gated DeltaNet, or none) then a SwiGLU
    /// MLP, as Qwen3.5's layers are, so counted as the text's are.
    pub machine_layers: usize,
    /// Of those, the layers whose mixer is a Gated DeltaNet.
    pub deltanet_layers: usize,
    pub text_layers: usize,
    pub width: usize,
    pub text_channels: usize,
    /// Of the machine's channels, those its layers use (the rest are free for what comes next).
    pub machine_in_use: usize,
    /// The SwiGLU layers' hidden units.
    pub hidden_units: usize,
    pub nonzero: usize,
    /// The compiled layers' matrices as dense ones (over the whole stream).
    pub dense: usize,
    /// The DeltaNet layers' recurrent state, in floats.
    pub state: usize,
    pub text_vocab: usize,
    pub machine_vocab: usize,
}

impl core::fmt::Display for Sizes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(
            f,
            "{} decoder layers: {} compiled ({} with a Gated DeltaNet mixer, a state of {} floats; {} SwiGLU MLPs of {} hidden units; {} nonzero weights, {:.2e} as dense matrices) in front of the text's {}",
            self.machine_layers + self.text_layers,
            self.machine_layers,
            self.deltanet_layers,
            self.state,
            self.machine_layers,
            self.hidden_units,
            self.nonzero,
            self.dense as f64,
            self.text_layers
        )?;
        write!(
            f,
            "a residual stream of {} channels ({} the text's, {} the machine's, {} of them in use); vocabulary {} text + {} machine tokens",
            self.width,
            self.text_channels,
            self.width - self.text_channels,
            self.machine_in_use,
            self.text_vocab,
            self.machine_vocab
        )
    }
}

impl Splice {
    pub fn new(text: Config) -> Result<Splice, SpliceError> {
        let h = text.hidden;
        let root = (h as f64).sqrt() as usize;
        if root * root != h {
            return Err(SpliceError::Hidden(h));
        }
        let width = 4 * h;
        // The machine's channels after the bias: the vocabulary's fields, the slot counter's
        // count, its one-hot slots and the step's record, the register file's channels, the
        // executor's, then the flag.
        let local_vocab = Vocab::at(1);
        let count = 1 + local_vocab.channels().len();
        let vocab = Vocab::on(h + 1, h);
        let rf = RegisterFile {
            shape: Shape::of(&MachineSpec::second()),
            d_model: width,
            one: h,
            kind: vocab.kind,
            val: vocab.val.map(|f| f.channel),
            record: h + count + 1 + SLOTS,
            slot: h + count + 1,
            first: h + count + 1 + SLOTS + 3,
        };
        let spec = MachineSpec::second();
        let exec = Exec {
            one: h,
            rom: rf.rom(),
            local: rf.local(),
            regs: spec.regs,
            launch: rf.launch(),
            thread: rf.thread(),
            lane: rf.next_lane(0),
            lanes: spec.lanes,
            memory: rf.memory(),
            val: rf.val,
            shared: rf.shared(),
            shared_groups: shared_groups(&rf.shape),
            reset: rf.reset(),
            file: rf.file_writes(),
            d_model: width,
            global_words: spec.global_words,
            block_len: spec.block_len,
            first: rf.first + rf.len(),
        };
        let results = Results { registers: rf, stores: exec.stores(), first: exec.first + exec.len() };
        let pcs = PcRows { registers: rf, start: results.start(), first: results.first + results.len() };
        let next = NextRecord {
            pcs,
            next: results.next(),
            fields: vocab.record.map(|f| f.channel),
            first: pcs.first + pcs.len(),
        };
        let need = next.first - h + next.len() + 1;
        if need > width - h {
            return Err(SpliceError::Narrow { need, hidden: h, have: width - h });
        }
        // The counter's head writes absolute channels; its decoder's steps take their bias from
        // channel 0, so it is built on the machine's own stream and shifted past the text.
        let counter = |one: usize, v: &Vocab, count: usize| Counter {
            d_model: width,
            one,
            kind: v.kind,
            count,
            slot: rf.slot - h + one,
            slots: SLOTS,
            record_in: v.record.map(|f| f.channel),
            record: rf.record - h + one,
        };
        // The decoders read the count and the record; the executor's decode reads the ROM words
        // the image layer leaves, and its stages the registers the file loads.
        let built = exec.build();
        let mut decode = counter(0, &local_vocab, count).decode().shifted(h);
        decode.units.extend(rf.decode().units);
        let mut address = rf.address();
        address.units.extend(built.decode.units);
        let mut layers = vec![Compiled::DeltaNet(Box::new(counter(h, &vocab, h + count).weights()))];
        layers.push(Compiled::SwiGlu(decode));
        layers.push(Compiled::DeltaNet(Box::new(rf.image())));
        layers.push(Compiled::SwiGlu(address));
        layers.push(Compiled::DeltaNet(Box::new(rf.file())));
        let mut stages = built.stages;
        if let Some(first) = stages.first_mut() {
            first.units.extend(results.flags().units);
            first.units.extend(pcs.decode().units);
        }
        // A store's word index is latched before the second stage, which turns it into the
        // memory groups that every load mixer (from the sixth stage on) writes at.
        if let Some(second) = stages.get_mut(1) {
            second.units.extend(rf.store_units().units);
        }
        let mut mixers = core::iter::once((1, rf.store_latch())).chain(built.mixers).peekable();
        for (i, stage) in stages.into_iter().enumerate() {
            if let Some((_, w)) = mixers.next_if(|(at, _)| *at == i) {
                layers.push(Compiled::DeltaNet(Box::new(w)));
            }
            layers.push(Compiled::SwiGlu(stage));
        }
        // The results row, then the lane's next PC (from the registers after the block) and the
        // PC rows, the next record's decoder, then the output that names the next token: the
        // next slot's VAL token, or at the step's last position the next record.
        layers.push(Compiled::DeltaNet(Box::new(results.weights())));
        layers.push(Compiled::SwiGlu(pcs.predicate()));
        layers.push(Compiled::SwiGlu(pcs.next_pc()));
        layers.push(Compiled::DeltaNet(Box::new(pcs.weights())));
        layers.push(Compiled::SwiGlu(next.minima()));
        layers.push(Compiled::SwiGlu(next.choose()));
        let mut output = results.output();
        output.units.extend(next.output().units);
        layers.push(Compiled::SwiGlu(output));
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
        Ok(Splice {
            text,
            width,
            bias: h,
            flag,
            flag_value: FLAG,
            vocab,
            layers,
            slot: rf.slot,
            slots: SLOTS,
            step_record: rf.record,
            registers: rf,
            exec,
            results,
            pcs,
            next,
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

    pub fn sizes(&self) -> Sizes {
        let (mut hidden_units, mut nonzero, mut dense, mut state, mut deltanet_layers) = (0, 0, 0, 0, 0);
        for l in &self.layers {
            nonzero += l.size().1;
            match l {
                Compiled::SwiGlu(l) => {
                    hidden_units += l.units.len();
                    dense += 3 * l.units.len() * self.width;
                }
                Compiled::DeltaNet(w) => {
                    deltanet_layers += 1;
                    dense += w.matrix_parameters();
                    state += w.heads * w.d_k * w.d_v;
                }
            }
        }
        Sizes {
            machine_layers: self.layers.len() - deltanet_layers,
            deltanet_layers,
            text_layers: self.text.layers,
            width: self.width,
            text_channels: self.text.hidden,
            // Up to the next record's last channel, and the flag.
            machine_in_use: self.next.first + self.next.len() - self.bias + 1,
            hidden_units,
            nonzero,
            dense,
            state,
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
        // Decoder layers: every Gated DeltaNet is a mixer, so an MLP follows it.
        let mixers = self.layers.iter().map(|l| matches!(l, Compiled::DeltaNet(_)));
        if let Some(i) = mixers.clone().zip(mixers.skip(1).chain([true])).position(|(a, b)| a && b) {
            return bad(alloc::format!("compiled layer {i}: a Gated DeltaNet with no SwiGLU MLP after it"));
        }
        for (i, l) in self.layers.iter().enumerate() {
            if let Compiled::DeltaNet(d) = l {
                if d.d_model != w || !d.sizes_agree() {
                    return bad(alloc::format!(
                        "compiled layer {i}: a DeltaNet whose tensors do not fit a stream of {w}"
                    ));
                }
            }
        }
        let r = &self.registers;
        if r.d_model != w
            || r.one != self.bias
            || r.kind != self.vocab.kind
            || r.val != self.vocab.val.map(|f| f.channel)
        {
            return bad(alloc::format!(
                "the register file's channels do not match the stream and the vocabulary: {r:?}"
            ));
        }
        let rows = self.embed.iter().chain(&self.head).flatten();
        let units = self.layers.iter().filter_map(|l| match l {
            Compiled::SwiGlu(l) => Some(&l.units),
            Compiled::DeltaNet(_) => None,
        });
        let units = units.flatten();
        let weights = units.flat_map(|u| u.gate.iter().chain(&u.up).chain(&u.down));
        let mut channels = rows.chain(weights).map(|&(c, _)| c);
        let mut named = [
            self.bias,
            self.flag,
            self.vocab.bias,
            self.vocab.kind,
            self.exec.first + self.exec.len() - 1,
            self.results.first + self.results.len() - 1,
            self.next.first + self.next.len() - 1,
            self.slot + self.slots - 1,
            self.step_record + 2,
            self.registers.first + self.registers.len() - 1,
            self.registers.record + 2,
            self.registers.slot + self.registers.shape.slots,
        ]
        .into_iter()
        .chain(self.vocab.val.iter().chain(&self.vocab.record).map(|f| f.channel));
        if let Some(c) = channels.find(|&c| c >= w).or_else(|| named.find(|&c| c >= w)) {
            return bad(alloc::format!("channel {c} lies outside the stream of {w}"));
        }
        let (e, r) = (&self.exec, &self.registers);
        let context = e.launch != r.launch()
            || e.thread != r.thread()
            || e.lane != r.next_lane(0)
            || e.memory != r.memory()
            || (e.shared, e.shared_groups, e.reset) != (r.shared(), shared_groups(&r.shape), r.reset())
            || e.file != r.file_writes()
            || e.val != r.val
            || e.d_model != w;
        if e.one != self.bias || e.rom != r.rom() || e.local != r.local() || context || e.first < r.first + r.len() {
            return bad(alloc::format!("the executor's channels do not match the register file's: {e:?}"));
        }
        if self.results.registers != *r || self.results.stores != e.stores() || self.results.first < e.first + e.len() {
            return bad(alloc::format!("the results row's channels do not follow the executor's: {:?}", self.results));
        }
        let (p, n) = (&self.pcs, &self.next);
        let follows =
            p.registers == *r && p.start == self.results.start() && p.first >= self.results.first + self.results.len();
        if !follows || n.pcs != *p || n.next != self.results.next() || n.fields != self.vocab.record.map(|f| f.channel)
        {
            return bad(alloc::format!(
                "the PC rows' and the next record's channels do not follow the results row's: {p:?}, {n:?}"
            ));
        }
        if n.first < p.first + p.len()
            || !(p.scratch().contains(&n.scratch().start) && n.scratch().end <= p.scratch().end)
        {
            return bad(alloc::format!("the next record's channels overlap the PC rows': {n:?}"));
        }
        Ok(())
    }

    /// Norm weights of the machine's layers: §2's on the bias and the machine's channels.
    pub(crate) fn machine_norm(&self) -> Vec<f32> {
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

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_machine;
