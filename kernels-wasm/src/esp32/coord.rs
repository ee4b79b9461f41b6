//! The coordinator: it plans the split, loads each node over its link, runs the pipeline and
//! keeps the embedding and the output layer (49 MB of F16 for the 125M layout: no board holds
//! it). Transport-free: a [`Link`] moves bytes, natively over TCP or a serial port, in the
//! browser to a node in the same page.

use super::budget::{self, Budget};
use super::cost::{link_micros, CostModel};
use super::msg::{Assign, Caps, Request, Response, TensorMeta};
use super::node::Clock;
use super::wire::{self, Decoded, Decoder, CHUNK};
use super::Esp32Error;
use crate::bitnet::model::build;
use crate::bitnet::model::sample::Sampler;
use crate::bitnet::model::{Config, Exec, Logits, Model, Quant};
use crate::gguf::{GgmlType, Gguf};
use crate::protocol::esp32::{Esp32Event, Esp32Summary, Hop, NodePlan, NodeReport};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::ops::Range;

/// A byte pipe to one node.
pub trait Link {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError>;
    /// Appends what arrives within `wait_ms` to `into`; `Ok(0)`: nothing came.
    fn recv(&mut self, wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError>;
}

impl<L: Link + ?Sized> Link for alloc::boxed::Box<L> {
    fn send(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        (**self).send(bytes)
    }

    fn recv(&mut self, wait_ms: u32, into: &mut Vec<u8>) -> Result<usize, LinkError> {
        (**self).recv(wait_ms, into)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("closed the connection")]
    Closed,
    #[error("{0}")]
    Io(String),
}

/// When to send a request again, and when to give up on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Silence after which the request is sent again.
    pub resend_ms: u32,
    /// Silence after which the node is declared gone.
    pub give_up_ms: u32,
    /// Longest single wait on the link.
    pub poll_ms: u32,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing { resend_ms: 2_000, give_up_ms: 20_000, poll_ms: 50 }
    }
}

/// Flips one bit in a frame, one frame in `every` on average, at random (a fixed cadence could
/// lock step with the resends and damage every copy): the fault injection of the reliability
/// tests and of `--flip-every`.
#[derive(Debug, Clone)]
pub struct Flipper {
    pub every: u32,
    state: u64,
    pub flipped: u64,
}

impl Flipper {
    pub fn new(every: u32, seed: u64) -> Flipper {
        Flipper { every, state: seed | 1, flipped: 0 }
    }

    fn next(&mut self) -> u64 {
        // xorshift64: the same faults for the same seed.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    /// Maybe flips a bit of `frame`; returns whether it did.
    pub fn apply(&mut self, frame: &mut [u8]) -> bool {
        if self.every == 0 || frame.is_empty() || !self.next().is_multiple_of(self.every as u64) {
            return false;
        }
        let bit = (self.next() % (frame.len() as u64 * 8)) as usize;
        frame[bit / 8] ^= 1 << (bit % 8);
        self.flipped += 1;
        true
    }
}

/// One node as the coordinator sees it.
pub struct Peer<L> {
    pub name: String,
    link: L,
    dec: Decoder,
    seq: u16,
    pub caps: Option<Caps>,
    flip: Option<Flipper>,
    pub resends: u64,
}

/// What one call moved.
struct Call {
    response: Response,
    sent: u64,
    received: u64,
    resends: u32,
}

impl<L: Link> Peer<L> {
    pub fn new(name: impl Into<String>, link: L) -> Peer<L> {
        Peer { name: name.into(), link, dec: Decoder::default(), seq: 0, caps: None, flip: None, resends: 0 }
    }

    pub fn link_mut(&mut self) -> &mut L {
        &mut self.link
    }

    /// Damage every `every`-th frame this side sends (tests).
    pub fn flip_every(mut self, every: u32, seed: u64) -> Peer<L> {
        self.flip = Some(Flipper::new(every, seed));
        self
    }

    fn fail(&self, what: &str, why: impl core::fmt::Display) -> Esp32Error {
        Esp32Error::Node { node: self.name.clone(), why: format!("{what}: {why}") }
    }

    fn send(&mut self, frame: &[u8], what: &str) -> Result<u64, Esp32Error> {
        let mut bytes = frame.to_vec();
        if let Some(f) = &mut self.flip {
            f.apply(&mut bytes);
        }
        self.link.send(&bytes).map_err(|e| self.fail(what, e))?;
        Ok(bytes.len() as u64)
    }

    /// Sends `req` and waits for its answer, sending it again after damage or silence.
    fn call(&mut self, req: &Request, t: &Timing) -> Result<Call, Esp32Error> {
        let what = request_name(req);
        // Sequence 0 is the node's "resend" (it cannot know a damaged frame's number): never a
        // request's.
        self.seq = self.seq.wrapping_add(1).max(1);
        let (cmd, payload) = req.encode();
        let frame = wire::encode(cmd, self.seq, &payload);
        let mut c = Call { response: Response::Ok, sent: self.send(&frame, what)?, received: 0, resends: 0 };
        let (mut quiet, mut silent) = (0u32, 0u32);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let got = self.link.recv(t.poll_ms, &mut buf).map_err(|e| self.fail(what, e))?;
            let mut resend = false;
            if got == 0 {
                quiet += t.poll_ms;
                silent += t.poll_ms;
            } else {
                quiet = 0;
                silent = 0;
                c.received += got as u64;
                self.dec.push(&buf);
            }
            while let Some(d) = self.dec.next_frame() {
                match d {
                    Decoded::Frame(f) if f.seq == 0 => {
                        resend |= Response::decode(f.cmd, &f.payload) == Ok(Response::Resend)
                    }
                    Decoded::Frame(f) if f.seq == self.seq => match Response::decode(f.cmd, &f.payload) {
                        Ok(Response::Resend) => resend = true,
                        Ok(Response::Error(e)) => return Err(self.fail(what, e)),
                        Ok(r) => {
                            c.response = r;
                            return Ok(c);
                        }
                        Err(_) => resend = true,
                    },
                    // An answer to an earlier copy of a request: already handled.
                    Decoded::Frame(_) => {}
                    Decoded::Corrupt(_) => resend = true,
                }
            }
            if silent >= t.give_up_ms {
                return Err(self.fail(what, format!("no answer for {} ms (gone?)", t.give_up_ms)));
            }
            if resend || quiet >= t.resend_ms {
                quiet = 0;
                c.resends += 1;
                self.resends += 1;
                if c.resends > 64 {
                    return Err(self.fail(what, "64 resends without a good answer (the link is too noisy)"));
                }
                c.sent += self.send(&frame, what)?;
            }
        }
    }
}

fn request_name(r: &Request) -> &'static str {
    match r {
        Request::Hello => "hello",
        Request::Assign(_) => "assignment",
        Request::Chunk { .. } => "weight load",
        Request::Commit => "weight commit",
        Request::Forward { .. } => "forward",
        Request::Stats => "stats",
        Request::Reset { .. } => "reset",
    }
}

/// The nodes, their blocks, and the run.
pub struct Cluster<L> {
    pub peers: Vec<Peer<L>>,
    pub ranges: Vec<Range<usize>>,
    max_rows: u64,
    timing: Timing,
    clock: Option<Clock>,
}

/// The tensors of blocks `range` in `g`: their metadata and bytes (the CRC-32s, a pass over
/// every byte, only if `crc`).
fn block_tensors<'a>(
    g: &Gguf,
    file: &'a [u8],
    c: &Config,
    range: Range<usize>,
    crc: bool,
) -> Result<Vec<(TensorMeta, &'a [u8])>, Esp32Error> {
    let mut out = Vec::new();
    for i in range {
        for (name, _) in build::block_tensors(c, i) {
            let mut names = alloc::vec![name.clone()];
            let scale = build::scale_tensor(&name);
            if g.tensor(&scale).is_some() {
                names.push(scale);
            }
            for n in names {
                let t = g.tensor(&n).ok_or_else(|| Esp32Error::Protocol(format!("the model lacks tensor {n}")))?;
                let data = file
                    .get(t.offset..t.offset + t.bytes)
                    .ok_or_else(|| Esp32Error::Protocol(format!("{n}: data past the end of the file (truncated?)")))?;
                let bytes = u32::try_from(t.bytes).map_err(|_| {
                    Esp32Error::Protocol(format!("{n}: {} bytes is more than a node can take", t.bytes))
                })?;
                let crc32 = if crc { wire::crc32(data) } else { 0 };
                let meta = TensorMeta { name: n, ty: t.ty.id(), dims: t.dims.clone(), bytes, crc32 };
                out.push((meta, data));
            }
        }
    }
    Ok(out)
}

/// The format of the model's block matrices.
pub fn quant_of(g: &Gguf) -> Result<Quant, Esp32Error> {
    let name = build::block_tensor(0, "attn_q");
    match g.tensor(&name).map(|t| t.ty) {
        Some(GgmlType::I2_S) => Ok(Quant::I2s),
        Some(GgmlType::TL1) => Ok(Quant::Tl1),
        Some(GgmlType::TL2) => Ok(Quant::Tl2),
        other => {
            Err(Esp32Error::Protocol(format!("{name}: {other:?} is not I2_S, TL1 or TL2 (convert the model first)")))
        }
    }
}

/// The fewest nodes of `budget` that hold `file`'s blocks with their KV caches for `context`.
pub fn fewest_nodes(g: &Gguf, file: &[u8], context: usize, budget: Budget) -> Result<usize, Esp32Error> {
    let c = Config::from_gguf(g)?;
    budget::fewest_nodes(&c, quant_of(g)?, &block_weights(g, file, &c)?, context, budget)
}

/// Each block's weight bytes.
pub fn block_weights(g: &Gguf, file: &[u8], c: &Config) -> Result<Vec<u64>, Esp32Error> {
    (0..c.layers)
        .map(|i| {
            Ok(budget::block_weights(
                &block_tensors(g, file, c, i..i + 1, false)?.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
            ))
        })
        .collect()
}

impl<L: Link> Cluster<L> {
    /// Greets every node.
    pub fn connect(mut peers: Vec<Peer<L>>, timing: Timing, clock: Option<Clock>) -> Result<Cluster<L>, Esp32Error> {
        for p in peers.iter_mut() {
            match p.call(&Request::Hello, &timing)?.response {
                Response::Caps(c) => p.caps = Some(c),
                other => return Err(p.fail("hello", format!("answered {other:?}"))),
            }
        }
        Ok(Cluster { peers, ranges: Vec::new(), max_rows: 1, timing, clock })
    }

    fn caps(&self, i: usize) -> &Caps {
        // Set by `connect` for every peer.
        static NONE: Caps =
            Caps { name: String::new(), sram: 0, psram: 0, clock_hz: 240_000_000, link_bps: 0, emulated: true };
        self.peers[i].caps.as_ref().unwrap_or(&NONE)
    }

    /// Plans the split of `file`'s blocks over the nodes and loads each node's share. Nothing
    /// moves until the whole plan fits. `model` and `prompt` (its text) name the run in the plan.
    pub fn load(
        &mut self,
        file: &[u8],
        g: &Gguf,
        context: usize,
        (model, prompt): (&str, &str),
        on: &mut dyn FnMut(Esp32Event),
    ) -> Result<(), Esp32Error> {
        let c = Config::from_gguf(g)?;
        let quant = quant_of(g)?;
        let weights = block_weights(g, file, &c)?;
        let budgets: Vec<Budget> =
            (0..self.peers.len()).map(|i| Budget { sram: self.caps(i).sram, psram: self.caps(i).psram }).collect();
        self.ranges = budget::plan(&c, quant, &weights, context, &budgets)?;
        let mut plans = Vec::new();
        self.max_rows = u64::MAX;
        for (i, r) in self.ranges.iter().enumerate() {
            let need = budget::need(&c, quant, r.len(), weights[r.clone()].iter().sum(), context);
            let rows = if r.is_empty() { u64::MAX } else { need.max_rows(budgets[i].sram, c.dim) };
            self.max_rows = self.max_rows.min(rows);
            let caps = self.caps(i);
            plans.push(NodePlan {
                name: self.peers[i].name.clone(),
                emulated: caps.emulated,
                first: r.start as u32,
                count: r.len() as u32,
                sram_budget: caps.sram,
                psram_budget: caps.psram,
                sram_need: if r.is_empty() { 0 } else { need.sram(rows) },
                weights: need.weights * !r.is_empty() as u64,
                kv_cache: need.kv_cache,
                clock_hz: caps.clock_hz,
                link_bps: caps.link_bps,
                max_rows: rows.min(u32::MAX as u64) as u32,
            });
        }
        on(Esp32Event::Plan { model: model.into(), prompt: prompt.into(), layers: c.layers as u32, nodes: plans });
        for i in 0..self.peers.len() {
            let r = self.ranges[i].clone();
            if r.is_empty() {
                continue;
            }
            let t0 = self.now();
            let tensors = block_tensors(g, file, &c, r.clone(), true)?;
            let assign = Assign {
                config: c.clone(),
                first: r.start as u32,
                count: r.len() as u32,
                context: context as u32,
                tensors: tensors.iter().map(|t| t.0.clone()).collect(),
            };
            let timing = self.timing;
            let p = &mut self.peers[i];
            let mut sent = p.call(&Request::Assign(assign), &timing)?.sent;
            for (ti, (_, data)) in tensors.iter().enumerate() {
                for (k, chunk) in data.chunks(CHUNK).enumerate() {
                    let req = Request::Chunk { tensor: ti as u32, offset: (k * CHUNK) as u32, data: chunk.to_vec() };
                    sent += p.call(&req, &timing)?.sent;
                }
            }
            sent += p.call(&Request::Commit, &timing)?.sent;
            let link_us = link_micros(sent, self.caps(i).link_bps);
            let wall_us = self.now().saturating_sub(t0);
            on(Esp32Event::Loaded { node: i as u32, bytes: sent, link_us, wall_us });
        }
        Ok(())
    }

    fn now(&self) -> u64 {
        self.clock.map_or(0, |c| c())
    }

    /// Rows `x` at positions `start..` through every node's blocks, in batches each node's SRAM
    /// holds; one event per batch.
    pub fn forward(
        &mut self,
        start: usize,
        x: Vec<f32>,
        dim: usize,
        on: &mut dyn FnMut(Esp32Event),
    ) -> Result<Vec<f32>, Esp32Error> {
        let batch = (self.max_rows.max(1) as usize).saturating_mul(dim);
        let mut out = Vec::with_capacity(x.len());
        for (b, rows) in x.chunks(batch).enumerate() {
            let pos = start + b * (batch / dim);
            let mut rows = rows.to_vec();
            let mut hops = Vec::new();
            for i in 0..self.peers.len() {
                if self.ranges[i].is_empty() {
                    continue;
                }
                let (t0, timing) = (self.now(), self.timing);
                let n = rows.len() / dim;
                let call = self.peers[i]
                    .call(&Request::Forward { start: pos as u32, rows: core::mem::take(&mut rows) }, &timing)?;
                let Response::Rows { rows: y, counts, .. } = call.response else {
                    return Err(self.peers[i].fail("forward", "answered without rows"));
                };
                if y.len() != n * dim {
                    return Err(self.peers[i].fail("forward", format!("{} values back for {n} rows", y.len())));
                }
                rows = y;
                let caps = self.caps(i);
                hops.push(Hop {
                    node: i as u32,
                    rows: n as u32,
                    compute_us: CostModel::esp32s3(caps.clock_hz).micros(&counts),
                    link_us: link_micros(call.sent + call.received, caps.link_bps),
                    wall_us: self.now().saturating_sub(t0),
                    bytes_out: call.sent,
                    bytes_in: call.received,
                    resends: call.resends,
                });
            }
            on(Esp32Event::Step { pos: pos as u32, hops });
            out.extend_from_slice(&rows);
        }
        Ok(out)
    }

    /// Each node's own account of the run.
    pub fn reports(&mut self) -> Result<Vec<NodeReport>, Esp32Error> {
        let timing = self.timing;
        let mut out = Vec::new();
        for (i, p) in self.peers.iter_mut().enumerate() {
            let Response::Stats(s) = p.call(&Request::Stats, &timing)?.response else {
                return Err(p.fail("stats", "answered without stats"));
            };
            out.push(NodeReport {
                node: i as u32,
                forwards: s.forwards,
                corrupt_in: s.corrupt_in,
                resent: s.resent,
                sram_used: s.sram_used,
                psram_used: s.psram_used,
                modelled_us: s.modelled_us,
                wall_us: s.wall_us,
            });
        }
        Ok(out)
    }

    /// Clears every node's KV cache.
    pub fn reset(&mut self) -> Result<(), Esp32Error> {
        let timing = self.timing;
        for p in self.peers.iter_mut() {
            p.call(&Request::Reset { weights: false }, &timing)?;
        }
        Ok(())
    }

    /// Runs the prompt through the pipeline: the generation, ready for its first token.
    pub fn start(
        &mut self,
        model: &Model,
        prompt: &[u32],
        ex: &Exec,
        on: &mut dyn FnMut(Esp32Event),
    ) -> Result<Generation, Esp32Error> {
        let x = model.embed(prompt)?;
        let mut x = self.forward(0, x, model.config.dim, on)?;
        let logits = model.head(&mut x, ex, Logits::Last)?;
        Ok(Generation {
            prompt: prompt.len(),
            logits,
            tokens: Vec::new(),
            text: Vec::new(),
            compute_us: 0,
            link_us: 0,
            t0: self.now(),
            steps: 0,
        })
    }

    /// Chooses the next token and, unless it is the `last`, runs it through the pipeline.
    pub fn next(
        &mut self,
        model: &Model,
        g: &mut Generation,
        sampler: &mut Sampler,
        last: bool,
        ex: &Exec,
        on: &mut dyn FnMut(Esp32Event),
    ) -> Result<u32, Esp32Error> {
        let id = sampler.sample(&g.logits);
        g.tokens.push(id);
        let piece = model.tokenizer.as_ref().map(|t| t.piece(id)).unwrap_or_default();
        g.text.extend_from_slice(&piece);
        let index = g.tokens.len() as u32 - 1;
        on(Esp32Event::Token { index, id, text: String::from_utf8_lossy(&piece).to_string(), bytes: piece });
        if !last {
            let x = model.embed(&[id])?;
            let (mut compute, mut link) = (0, 0);
            let mut x = self.forward(g.prompt + g.tokens.len() - 1, x, model.config.dim, &mut |e| {
                if let Esp32Event::Step { hops, .. } = &e {
                    // Saturating: the times derive from counts the nodes report.
                    compute = hops.iter().fold(compute, |a: u64, h| a.saturating_add(h.compute_us));
                    link = hops.iter().fold(link, |a: u64, h| a.saturating_add(h.link_us));
                }
                on(e)
            })?;
            g.compute_us = g.compute_us.saturating_add(compute);
            g.link_us = g.link_us.saturating_add(link);
            g.steps += 1;
            g.logits = model.head(&mut x, ex, Logits::Last)?;
        }
        Ok(id)
    }

    /// The totals so far: modelled tokens per second over the generation steps (the prompt
    /// apart), the link's share of that time, the emulation's wall rate.
    pub fn summary(&self, g: &Generation) -> Esp32Summary {
        let total = g.compute_us.saturating_add(g.link_us);
        let per_s = |us: u64| if us == 0 { 0.0 } else { g.steps as f64 * 1e6 / us as f64 };
        Esp32Summary {
            tokens: g.tokens.clone(),
            text: String::from_utf8_lossy(&g.text).to_string(),
            prompt_tokens: g.prompt as u32,
            modelled_tok_s: per_s(total),
            link_share: if total == 0 { 0.0 } else { g.link_us as f64 / total as f64 },
            wall_tok_s: per_s(self.now().saturating_sub(g.t0)),
            resends: self.peers.iter().map(|p| p.resends).sum(),
            nodes: Vec::new(),
        }
    }

    /// Prompt, then `n` tokens, the blocks on the nodes and the embedding and output layer here
    /// (`ex`). Greedy at temperature 0: the same tokens as [`Model::forward`] on one machine.
    pub fn generate(
        &mut self,
        model: &Model,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        ex: &Exec,
        on: &mut dyn FnMut(Esp32Event),
    ) -> Result<Esp32Summary, Esp32Error> {
        let mut g = self.start(model, prompt, ex, on)?;
        for i in 0..n {
            self.next(model, &mut g, sampler, i + 1 == n, ex, on)?;
        }
        let mut s = self.summary(&g);
        s.nodes = self.reports()?;
        Ok(s)
    }
}

/// A generation in progress on a cluster.
pub struct Generation {
    pub prompt: usize,
    logits: Vec<f32>,
    pub tokens: Vec<u32>,
    pub text: Vec<u8>,
    /// Modelled microseconds of the generation steps: compute and link.
    pub compute_us: u64,
    pub link_us: u64,
    t0: u64,
    steps: u64,
}
