//! The node program: it holds a contiguous range of BitNet blocks within a fixed memory budget
//! and answers the coordinator's requests. Transport-free (bytes in, bytes out) and `no_std`, so
//! the same code runs on a board, in the host's emulated nodes and in the browser tab.

use super::budget::{self, Budget, Need};
use super::cost::{block_counts, CostModel};
use super::msg::{Assign, Caps, Counts, Request, Response, Stats};
use super::wire::{self, Decoded, Frame};
use super::Esp32Error;
use crate::bitnet::backend::Backend;
use crate::bitnet::blob::Blob;
use crate::bitnet::model::build::{self, Source};
use crate::bitnet::model::forward::Block;
use crate::bitnet::model::par::Single;
use crate::bitnet::model::{Cache, Config, Exec, ModelError};
use crate::gguf::GgmlType;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// A monotonic clock in microseconds, where the platform has one.
pub type Clock = fn() -> u64;

struct Loading {
    assign: Assign,
    bufs: Vec<Vec<u8>>,
    need: Need,
}

struct Ready {
    config: Config,
    blocks: Vec<Block>,
    cache: Cache,
    need: Need,
    max_rows: u64,
}

enum State {
    Idle,
    Loading(Loading),
    Ready(Ready),
}

pub struct Node {
    caps: Caps,
    budget: Budget,
    cost: CostModel,
    backend: Backend,
    clock: Option<Clock>,
    state: State,
    /// The last request's sequence number and command, and the response frame sent for it.
    last: Option<(u16, u8, Vec<u8>)>,
    stats: Stats,
    /// A resend was asked for and no good frame has come since: one damaged frame (and the
    /// junk after it) gets one request, or every copy the request brings could bring more.
    asked_resend: bool,
}

impl Node {
    /// A node with `caps` (its budget comes from them), computing on `backend`.
    pub fn new(caps: Caps, backend: Backend, clock: Option<Clock>) -> Node {
        let budget = Budget { sram: caps.sram, psram: caps.psram };
        let cost = CostModel::esp32s3(caps.clock_hz);
        Node {
            caps,
            budget,
            cost,
            backend,
            clock,
            state: State::Idle,
            last: None,
            stats: Stats::default(),
            asked_resend: false,
        }
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// A new connection: a repeated sequence number from it is a new request.
    pub fn reconnect(&mut self) {
        self.last = None;
    }

    /// What arrived on the link; returns the bytes to send back (none for more junk after a
    /// resend was already asked for).
    pub fn on_decoded(&mut self, d: Decoded) -> Vec<u8> {
        let out = match d {
            Decoded::Corrupt(_) => {
                self.stats.corrupt_in += 1;
                if core::mem::replace(&mut self.asked_resend, true) {
                    return Vec::new();
                }
                let (cmd, payload) = Response::Resend.encode();
                wire::encode(cmd, 0, &payload)
            }
            Decoded::Frame(f) => {
                self.asked_resend = false;
                self.on_frame(f)
            }
        };
        self.stats.frames_out += 1;
        self.stats.bytes_out += out.len() as u64;
        out
    }

    fn on_frame(&mut self, f: Frame) -> Vec<u8> {
        self.stats.frames_in += 1;
        self.stats.bytes_in += (f.payload.len() + wire::HEADER + 2) as u64;
        if let Some((seq, cmd, frame)) = &self.last {
            if *seq == f.seq && *cmd == f.cmd {
                // The coordinator did not get our answer: the same bytes again, not a second
                // forward through the KV cache.
                self.stats.resent += 1;
                return frame.clone();
            }
        }
        let response = match Request::decode(f.cmd, &f.payload) {
            Ok(req) => self.handle(req).unwrap_or_else(|e| Response::Error(e.to_string())),
            Err(e) => Response::Error(format!("request 0x{:02x}: {e}", f.cmd)),
        };
        let (cmd, payload) = response.encode();
        let frame = wire::encode(cmd, f.seq, &payload);
        self.last = Some((f.seq, f.cmd, frame.clone()));
        frame
    }

    fn now(&self) -> u64 {
        self.clock.map_or(0, |c| c())
    }

    pub fn handle(&mut self, req: Request) -> Result<Response, Esp32Error> {
        match req {
            Request::Hello => Ok(Response::Caps(self.caps.clone())),
            Request::Assign(a) => self.assign(a),
            Request::Chunk { tensor, offset, data } => {
                let State::Loading(l) = &mut self.state else {
                    return Err(Esp32Error::Protocol("a weight chunk before an assignment".into()));
                };
                let t = l.assign.tensors.get(tensor as usize).ok_or_else(|| {
                    Esp32Error::Protocol(format!("chunk for tensor {tensor} of {}", l.assign.tensors.len()))
                })?;
                let buf = &mut l.bufs[tensor as usize];
                if offset as usize != buf.len() || buf.len() + data.len() > t.bytes as usize {
                    return Err(Esp32Error::Protocol(format!(
                        "{}: chunk at {offset}+{} after {} of {} bytes (chunks must come in order)",
                        t.name,
                        data.len(),
                        buf.len(),
                        t.bytes
                    )));
                }
                buf.extend_from_slice(&data);
                Ok(Response::Ok)
            }
            Request::Commit => self.commit(),
            Request::Forward { start, rows } => self.forward(start as usize, rows),
            Request::Stats => Ok(Response::Stats(self.stats.clone())),
            Request::Reset { weights } => {
                if weights {
                    self.state = State::Idle;
                    self.stats.psram_used = 0;
                    self.stats.sram_used = 0;
                } else if let State::Ready(r) = &mut self.state {
                    r.cache.clear();
                }
                Ok(Response::Ok)
            }
        }
    }

    fn assign(&mut self, a: Assign) -> Result<Response, Esp32Error> {
        validate(&a)?;
        let c = &a.config;
        let (first, count) = (a.first as usize, a.count as usize);
        let mut expected: Vec<(String, Option<Vec<u64>>)> = Vec::new();
        for i in first..first + count {
            for (name, dims) in build::block_tensors(c, i) {
                if let Some(t) = a.tensors.iter().find(|t| t.name == name) {
                    if matches!(GgmlType::from_id(t.ty), Some(GgmlType::TL1 | GgmlType::TL2)) {
                        expected.push((build::scale_tensor(&name), None));
                    }
                }
                expected.push((name, Some(dims)));
            }
        }
        for (name, dims) in &expected {
            let t = a
                .tensors
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| Esp32Error::Protocol(format!("the assignment lacks tensor {name}")))?;
            if let Some(dims) = dims.as_ref().filter(|d| **d != t.dims) {
                return Err(Esp32Error::Protocol(format!("{name}: shape {:?}, expected {dims:?}", t.dims)));
            }
        }
        if a.tensors.len() != expected.len() {
            return Err(Esp32Error::Protocol(format!(
                "the assignment lists {} tensors; blocks {first}..{} have {}",
                a.tensors.len(),
                first + count,
                expected.len()
            )));
        }
        let quant = quant_of(&a)?;
        let need = budget::need(c, quant, count, budget::block_weights(&a.tensors), a.context as usize);
        budget::check(&need, &self.budget, c.dim, first, count)?;
        // A new assignment replaces the old one: free it before taking the new buffers.
        self.state = State::Idle;
        // Only now, with the budget checked, is memory taken.
        let bufs = a.tensors.iter().map(|t| Vec::with_capacity(t.bytes as usize)).collect();
        self.stats.psram_used = need.weights;
        self.state = State::Loading(Loading { assign: a, bufs, need });
        Ok(Response::Ok)
    }

    fn commit(&mut self) -> Result<Response, Esp32Error> {
        let State::Loading(l) = core::mem::replace(&mut self.state, State::Idle) else {
            return Err(Esp32Error::Protocol("commit without an assignment".into()));
        };
        let Loading { assign: a, bufs, need } = l;
        for (t, b) in a.tensors.iter().zip(&bufs) {
            if b.len() != t.bytes as usize {
                return Err(Esp32Error::Protocol(format!("{}: {} of {} bytes arrived", t.name, b.len(), t.bytes)));
            }
            let crc = wire::crc32(b);
            if crc != t.crc32 {
                return Err(Esp32Error::Protocol(format!(
                    "{}: CRC-32 {crc:08x}, the coordinator sent {:08x}",
                    t.name, t.crc32
                )));
            }
        }
        let mut src = Received {
            tensors: a.tensors.iter().map(|t| (t.name.clone(), t.ty, t.dims.clone())).collect(),
            bufs: bufs.into_iter().map(Some).collect(),
        };
        let c = a.config;
        let (first, count, context) = (a.first as usize, a.count as usize, a.context as usize);
        let blocks = (first..first + count).map(|i| build::block(&mut src, &c, i)).collect::<Result<Vec<_>, _>>()?;
        let cache = Cache::for_layers(&c, count, context);
        let max_rows = need.max_rows(self.budget.sram, c.dim);
        self.stats.psram_used = need.weights + cache.bytes() as u64;
        self.state = State::Ready(Ready { config: c, blocks, cache, need, max_rows });
        Ok(Response::Ok)
    }

    fn forward(&mut self, start: usize, mut x: Vec<f32>) -> Result<Response, Esp32Error> {
        let t0 = self.now();
        let State::Ready(r) = &mut self.state else {
            return Err(Esp32Error::Protocol("forward before the weights were committed".into()));
        };
        let dim = r.config.dim;
        let n = x.len() / dim;
        if x.is_empty() || !x.len().is_multiple_of(dim) {
            return Err(Esp32Error::Protocol(format!("{} values is not a whole number of {dim}-wide rows", x.len())));
        }
        if n as u64 > r.max_rows {
            return Err(Esp32Error::Budget(format!(
                "{n} rows need {} of SRAM; the node has {} (at most {} rows)",
                budget::bytes(r.need.sram(n as u64)),
                budget::bytes(self.budget.sram),
                r.max_rows
            )));
        }
        if start > r.cache.len || start + n > r.cache.context {
            return Err(Esp32Error::Model(ModelError::Context { pos: start + n, context: r.cache.context }));
        }
        let ex = Exec { backend: self.backend, par: &Single, simd: false, reference: false };
        let mut counts = Counts::default();
        for (b, block) in r.blocks.iter().enumerate() {
            block.forward(&mut x, start, r.cache.layer(b), &ex)?;
            counts.add(&block_counts(&r.config, block.attn.q.quant(), n, start));
        }
        r.cache.len = start + n;
        let sram = r.need.sram(n as u64);
        let wall_us = self.clock.map_or(0, |c| c()).saturating_sub(t0);
        self.stats.forwards += 1;
        self.stats.rows += n as u64;
        self.stats.modelled_us += self.cost.micros(&counts);
        self.stats.wall_us += wall_us;
        self.stats.sram_used = self.stats.sram_used.max(sram);
        Ok(Response::Rows { rows: x, counts, wall_us })
    }
}

/// The single format of an assignment's matrices (the cost model is per format).
fn quant_of(a: &Assign) -> Result<crate::bitnet::model::Quant, Esp32Error> {
    use crate::bitnet::model::Quant;
    let mut q = None;
    for t in a.tensors.iter().filter(|t| t.dims.len() == 2) {
        let this = match GgmlType::from_id(t.ty) {
            Some(GgmlType::I2_S) => Quant::I2s,
            Some(GgmlType::TL1) => Quant::Tl1,
            Some(GgmlType::TL2) => Quant::Tl2,
            _ => return Err(Esp32Error::Protocol(format!("{}: type {} is not I2_S, TL1 or TL2", t.name, t.ty))),
        };
        if q.is_some_and(|q| q != this) {
            return Err(Esp32Error::Protocol(format!("{}: formats are mixed within the assignment", t.name)));
        }
        q = Some(this);
    }
    q.ok_or_else(|| Esp32Error::Protocol("the assignment has no matrices".into()))
}

/// A shape that the layer code can run without dividing by zero or overflowing.
fn validate(a: &Assign) -> Result<(), Esp32Error> {
    let c = &a.config;
    let bad = |why: &str| Err(Esp32Error::Protocol(format!("assignment: {why}")));
    if c.heads == 0
        || c.kv_heads == 0
        || !c.heads.is_multiple_of(c.kv_heads)
        || !c.dim.is_multiple_of(c.heads)
        || !c.head_dim().is_multiple_of(2)
    {
        return bad("heads, KV heads and width do not make whole, even heads");
    }
    if c.dim == 0 || c.ffn == 0 || c.dim > 1 << 16 || c.ffn > 1 << 18 {
        return bad("width or FFN size out of range");
    }
    if c.layers > 4096 || a.count == 0 || a.first.checked_add(a.count).is_none_or(|end| end as usize > c.layers) {
        return bad("the block range is empty or beyond the model's layers");
    }
    if a.context == 0 || a.context > 1 << 20 || a.context as usize > c.context.max(1) {
        return bad("the context is zero or longer than the model's");
    }
    if !c.eps.is_finite() || !c.rope_base.is_finite() {
        return bad("eps or RoPE base is not finite");
    }
    Ok(())
}

/// Tensors a node received, handed to the layer builder without a copy.
struct Received {
    tensors: Vec<(String, u32, Vec<u64>)>,
    bufs: Vec<Option<Vec<u8>>>,
}

impl Source for Received {
    fn take(&mut self, name: &str, dims: Option<&[u64]>) -> Result<(GgmlType, Blob), ModelError> {
        let i = self.tensors.iter().position(|t| t.0 == name).ok_or_else(|| ModelError::tensor(name, "missing"))?;
        let (_, ty, have) = &self.tensors[i];
        if let Some(dims) = dims.filter(|d| have != d) {
            return Err(ModelError::tensor(name, format!("shape {have:?}, expected {dims:?}")));
        }
        let ty = GgmlType::from_id(*ty).ok_or_else(|| ModelError::tensor(name, format!("unknown type {ty}")))?;
        let data = self.bufs[i].take().ok_or_else(|| ModelError::tensor(name, "used twice"))?;
        Ok((ty, Blob::from(data)))
    }

    fn has(&self, name: &str) -> bool {
        self.tensors.iter().any(|t| t.0 == name)
    }
}
