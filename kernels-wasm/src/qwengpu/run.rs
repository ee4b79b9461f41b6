//! Running a launch on the compiled layers: the token protocol, and lockstep checking against
//! the interpreter after every machine step.
//!
//! Tokens, in order: the program image (one per ROM row, carrying the row as a pending ROM
//! write), the input words, each thread's special registers and parameters, each warp's initial
//! stack row and each CTA's status row (pending writes), then a FETCH record for warp 0. From
//! there the layers drive themselves (`control`): every token's output record — the sequencer's
//! next registers and its register, memory and control-row writes — is the next token's input,
//! and the host only copies it, until the layers say DONE. Last, VAL tokens read global memory
//! back.

use super::compiled::{Compiled, Op, SPECIALS};
use super::control::{self, ABSENT, CTRL, DONE, EXEC, FETCH, LIVE};
use super::interp::{Entry, Launch, Machine, MachineError, StepRecord};
use super::isa::{Program, Special};
use super::memory::{decode_row, M};
use super::net::{Group, Layer, MemLayer, Schedule, State, StreamError};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("compiled layers: {0}")]
    Stream(#[from] StreamError),
    #[error("{0}")]
    Program(String),
    #[error("step {step}: the compiled layers and the interpreter differ: {what}")]
    Lockstep { step: u64, what: String },
}

/// Writes a token carries into the state rows (the previous token's output record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub reg: Option<(usize, u32)>,
    pub global: Option<(usize, u32)>,
    pub shared: Option<(usize, u32)>,
}

/// What a token's output record says.
#[derive(Debug, Clone, Default)]
pub struct Out {
    pub pending: Pending,
    /// The instruction's opcode as the ROM head read it.
    pub op: Option<Op>,
    /// The loaded (or read-back) word.
    pub val: Option<u32>,
    /// The next token's record (and the control-row writes it carries).
    pub next: Vec<(Group, usize)>,
    /// This token's write of a warp's row: the warp and each group's hot index.
    pub warp_write: Option<(usize, Vec<Option<usize>>)>,
}

/// A token's input record.
#[derive(Debug, Clone, Default)]
pub struct Token {
    /// Hot channels of the input record: the sequencer's registers (copied from the previous
    /// token's output) and pending writes of control rows.
    pub set: Vec<(Group, usize)>,
    pub pending: Pending,
    pub rom: Option<(usize, Vec<(Group, usize)>)>,
    pub query: Option<usize>,
}

/// A future that a browser's event loop may have to drive (a WebGPU read-back).
pub type LocalFuture<'a, T> = core::pin::Pin<alloc::boxed::Box<dyn core::future::Future<Output = T> + 'a>>;

/// Another executor of the same layers (the GPU's, `gpu::qwengpu`): it runs one token's layers
/// on the input record `st` holds, and leaves in `st` and in the heads' rows what it computed,
/// so the token protocol and the lockstep check read its results.
pub trait Executor {
    /// A fresh machine: every state row unwritten.
    fn reset(&mut self);
    /// Seconds spent on the device since the last call, where the executor measures them.
    fn device_seconds(&mut self) -> Option<f64> {
        None
    }
    fn forward<'a>(
        &'a mut self,
        s: &'a super::net::Stream,
        st: &'a mut State,
        layers: &'a mut [Layer],
    ) -> LocalFuture<'a, Result<(), RunError>>;
    /// Runs tokens from the input record `input` on, each next input made from the last output
    /// by `plan`, until DONE, `tokens` tokens or `records` CTRL records; `None` where the
    /// executor only runs single tokens. The state rows stay on the device.
    fn run_batch<'a>(
        &'a mut self,
        _plan: &'a ExecPlan,
        _input: &'a [(u32, u32)],
        _tokens: u32,
        _records: u32,
    ) -> Option<LocalFuture<'a, Result<Batch, RunError>>> {
        None
    }
}

/// What a device needs to run EXEC-phase tokens back to back without the host: the host's
/// copy from each output record into the next input record, and the record's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPlan {
    /// (from, to, key) group ids: a hot `from` makes `to` hot at the same channel in the next
    /// input. With a key (not [`NO_KEY`]) only while the key is hot, and then `from` must be hot
    /// (a pending write's value nibbles).
    pub copies: Vec<(u32, u32, u32)>,
    /// The input record's kind, warp, pc and mask groups, and the kinds' channels.
    pub kind: u32,
    pub warp: u32,
    pub pc: u32,
    pub mask: u32,
    pub exec: u32,
    pub ctrl: u32,
    pub done: u32,
}

pub const NO_KEY: u32 = u32::MAX;

/// EXEC-phase tokens run in one go (see [`Executor::run_batch`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    pub tokens: u64,
    /// Tokens whose input kind was not EXEC.
    pub control: u64,
    /// A CTRL token's (warp, pc, mask) each.
    pub records: Vec<(u32, u32, u32)>,
    /// The next token's input record (group, channel), which says DONE at the end.
    pub next: Vec<(u32, u32)>,
}

/// Runs a launch or token whose executor never waits (the CPU's, or a native GPU that blocks)
/// to its end: one poll.
fn at_once<T>(f: impl core::future::Future<Output = Result<T, RunError>>) -> Result<T, RunError> {
    let f = core::pin::pin!(f);
    match f.poll(&mut core::task::Context::from_waker(core::task::Waker::noop())) {
        core::task::Poll::Ready(r) => r,
        core::task::Poll::Pending => {
            Err(RunError::Program("this executor waits for the GPU: call launch_async and await it".into()))
        }
    }
}

/// The compiled machine with its state rows, running tokens.
pub struct Runner {
    pub c: Compiled,
    st: State,
    schedule: Schedule,
    pub tokens: u64,
    /// Check every step against the interpreter (on by default).
    pub lockstep: bool,
    /// Record a [`StepView`] per step (for the playground).
    pub views: bool,
    /// A clock in seconds; when set, the execution phase (first FETCH to DONE) is timed.
    pub clock: Option<fn() -> f64>,
    /// Runs the layers instead of this CPU executor when set.
    pub executor: Option<alloc::boxed::Box<dyn Executor>>,
    /// With such an executor, EXEC-phase tokens per dispatch when no step is checked, viewed or
    /// timed (1: the host sees every token).
    pub batch: u32,
}

/// One token of a step, as its input and output records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenView {
    pub thread: usize,
    pub block: usize,
    pub slot: usize,
    /// 1 for a shuffle's second token (the temporary moved into d).
    pub phase: usize,
    pub op: Option<Op>,
    /// The writes its output record carries to the next token.
    pub writes: Pending,
}

/// One step as the state rows show it afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepView {
    pub record: StepRecord,
    /// The warp's registers decoded from the register file's rows (`[lane][r]`).
    pub regs: Vec<Vec<u32>>,
    /// Global memory decoded from its rows, and the running CTA's shared memory.
    pub global: Vec<u32>,
    pub shared: Vec<u32>,
    /// The warp's SIMT stack decoded from its state row.
    pub stack: Vec<Entry>,
    pub tokens: Vec<TokenView>,
}

/// A launch's tokens by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    pub image: u64,
    pub inputs: u64,
    /// Special registers and parameters, and the initial stack and status rows.
    pub specials: u64,
    pub exec: u64,
    /// CTRL and FETCH tokens (one each per step).
    pub control: u64,
    pub val: u64,
}

fn row_word(head: &MemLayer, row: usize) -> Option<u32> {
    let r = head.row(row);
    if r.iter().all(|&v| v == 0.0) {
        return Some(0);
    }
    decode_row(r, M)
}

impl Runner {
    pub fn new(c: Compiled) -> Runner {
        let st = State::new(&c.stream);
        let schedule = Schedule::new(&c.stream, &c.layers);
        Runner { c, st, schedule, tokens: 0, lockstep: true, views: false, clock: None, executor: None, batch: 1 }
    }

    fn head(&self, i: usize) -> &MemLayer {
        match &self.c.layers[i] {
            Layer::Mem(m) => m,
            Layer::Mlp(_) => unreachable!("heads index DeltaNet layers"),
        }
    }

    /// One token through every layer.
    pub fn token(&mut self, t: &Token) -> Result<Out, RunError> {
        at_once(self.token_async(t))
    }

    async fn token_async(&mut self, t: &Token) -> Result<Out, RunError> {
        let (s, io) = (&self.c.stream, &self.c.io);
        let st = &mut self.st;
        st.reset(s);
        for &(g, i) in &t.set {
            st.put(s, g, i);
        }
        let p = t.pending;
        for (w, key, val) in [(p.reg, io.prk, &io.prv), (p.global, io.pgk, &io.pgv), (p.shared, io.psk, &io.psv)] {
            if let Some((k, v)) = w {
                st.put(s, key, k);
                for (i, g) in val.iter().enumerate() {
                    st.put(s, *g, ((v >> (4 * i)) & 15) as usize);
                }
            }
        }
        if let Some((row, hot)) = &t.rom {
            st.put(s, io.prom, *row);
            for &(g, i) in hot {
                st.put(s, g, i);
            }
        }
        if let Some(q) = t.query {
            st.put(s, io.qg, q);
        }
        match &mut self.executor {
            Some(e) => e.forward(s, st, &mut self.c.layers).await?,
            None => self.schedule.forward(s, st, &mut self.c.layers)?,
        }
        self.tokens += 1;
        let word = |w: &[super::net::Group]| {
            w.iter().enumerate().try_fold(0u32, |acc, (k, g)| Some(acc | (st.get(*g)? as u32) << (4 * k)))
        };
        let pair = |key: super::net::Group, val: &[super::net::Group]| -> Result<Option<(usize, u32)>, RunError> {
            match st.get(key) {
                None => Ok(None),
                Some(k) => match word(val) {
                    Some(v) => Ok(Some((k, v))),
                    None => Err(RunError::Program(alloc::format!("a write to row {k} without a value"))),
                },
            }
        };
        let op = st.get(io.inst.op).map(|i| self.c.ops[i]);
        let pair = |key, val: &[super::net::Group]| {
            pair(key, val).map_err(|e| RunError::Program(alloc::format!("{op:?}: {e}")))
        };
        let q = &io.seq;
        let next: Vec<(Group, usize)> =
            q.carry.iter().filter_map(|&(from, to)| st.get(from).map(|h| (to, h))).collect();
        let warp_write = st.get(q.owk).map(|w| (w, q.owv.groups().iter().map(|g| st.get(*g)).collect()));
        Ok(Out {
            pending: Pending {
                reg: pair(io.ork, &io.orv)?,
                global: pair(io.ogk, &io.ogv)?,
                shared: pair(io.osk, &io.osv)?,
            },
            op,
            val: word(&io.ld),
            next,
            warp_write,
        })
    }
}

/// The register, global and shared pending writes' (key, value nibbles) groups: in the output
/// record (`out`) or the next input record.
fn pending_groups(io: &super::compiled::Io, out: bool) -> [(Group, &[Group]); 3] {
    match out {
        true => [(io.ork, &io.orv[..]), (io.ogk, &io.ogv[..]), (io.osk, &io.osv[..])],
        false => [(io.prk, &io.prv[..]), (io.pgk, &io.pgv[..]), (io.psk, &io.psv[..])],
    }
}

fn with_pending(w: Option<(usize, u32)>, row: usize, v: Option<u32>) -> Option<u32> {
    match w {
        Some((k, x)) if k == row => Some(x),
        _ => v,
    }
}

/// Tokens of the execution phase by kind, `[EXEC, CTRL, FETCH]`, and the seconds they took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ByKind {
    pub tokens: [u64; 3],
    pub seconds: [f64; 3],
}

impl ByKind {
    pub fn add(&mut self, o: &ByKind) {
        for k in 0..3 {
            self.tokens[k] += o.tokens[k];
            self.seconds[k] += o.seconds[k];
        }
    }
}

/// What a launch did on the compiled layers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub steps: u64,
    pub tokens: u64,
    /// Seconds from the first FETCH to DONE (with a [`Runner::clock`]), lockstep included if on.
    pub exec_seconds: Option<f64>,
    /// With a clock: that phase's tokens and their seconds by kind (EXEC, CTRL, FETCH), the
    /// lockstep checks left out.
    pub by_kind: Option<ByKind>,
    pub counts: TokenCounts,
    pub global: Vec<u32>,
    pub records: Vec<StepRecord>,
    pub views: Vec<StepView>,
    /// The executor's own time on its device for the whole launch (a GPU's timestamp
    /// queries), where it measures one.
    pub device_seconds: Option<f64>,
}

impl Runner {
    /// Loads the program, the inputs and the launch, runs to the end in lockstep with the
    /// interpreter (every step: the record, every register of the warp in every register-file
    /// copy, global memory, the CTA's shared memory, every warp's SIMT stack), and reads global
    /// memory back with VAL tokens.
    pub fn launch(
        &mut self,
        program: &Program,
        input: &[u32],
        launch: &Launch,
        limit: u64,
    ) -> Result<Report, RunError> {
        at_once(self.launch_async(program, input, launch, limit))
    }

    /// [`Self::launch`] for an executor that waits (WebGPU in a browser); the same code.
    pub async fn launch_async(
        &mut self,
        program: &Program,
        input: &[u32],
        launch: &Launch,
        limit: u64,
    ) -> Result<Report, RunError> {
        let spec = self.c.spec;
        let mut m = Machine::new(spec, program.clone(), input, launch.clone())?;
        if launch.params.len() > super::compiled::MAX_PARAMS {
            return Err(RunError::Program(alloc::format!(
                "{} parameters; the compiled machine takes {}",
                launch.params.len(),
                super::compiled::MAX_PARAMS
            )));
        }
        let start = self.tokens;
        // A fresh machine: every state row unwritten.
        for l in &mut self.c.layers {
            if let Layer::Mem(h) = l {
                h.state.iter_mut().for_each(|v| *v = 0.0);
            }
        }
        if let Some(e) = &mut self.executor {
            e.reset();
            e.device_seconds();
        }
        // The program image; the last row is the no-op.
        let nop = self.c.rom_rows - 1;
        let mut image = vec![(nop, self.c.encode(&self.c.io.promv, None, true).map_err(RunError::Program)?)];
        for (b, block) in program.blocks.iter().enumerate() {
            for (i, inst) in block.iter().enumerate() {
                let hot =
                    self.c.encode(&self.c.io.promv, Some(inst), i + 1 == block.len()).map_err(RunError::Program)?;
                image.push((self.c.rom_row(b, i), hot));
            }
        }
        let mut counts = TokenCounts { image: image.len() as u64, ..TokenCounts::default() };
        for rom in image {
            self.token_async(&Token { rom: Some(rom), ..Token::default() }).await?;
        }
        for (i, &v) in input.iter().enumerate().filter(|(_, &v)| v != 0) {
            counts.inputs += 1;
            self.token_async(&Token {
                pending: Pending { global: Some((i, v)), ..Pending::default() },
                ..Token::default()
            })
            .await?;
        }
        let block = launch.block.next_multiple_of(spec.lanes);
        for (w, iw) in m.warps.iter().enumerate() {
            for l in 0..spec.lanes {
                let thread = w * spec.lanes + l;
                let mut values: Vec<(Special, u32)> = SPECIALS
                    .iter()
                    .map(|&s| {
                        let v = match s {
                            Special::Tid => iw.first_tid + l,
                            Special::Ntid => block,
                            Special::Ctaid => iw.cta,
                            Special::Nctaid => launch.grid,
                            _ => l,
                        };
                        (s, v as u32)
                    })
                    .collect();
                values.extend(launch.params.iter().enumerate().map(|(i, &v)| (Special::Param(i as u8), v)));
                for (s, v) in values.into_iter().filter(|&(_, v)| v != 0) {
                    counts.specials += 1;
                    let key = thread * self.c.rows + self.c.special_row(s);
                    self.token_async(&Token {
                        pending: Pending { reg: Some((key, v)), ..Pending::default() },
                        ..Token::default()
                    })
                    .await?;
                }
            }
        }
        // Control rows: every warp's stack (one entry: block 0, all lanes, no join) and every
        // CTA's warp statuses.
        let q = self.c.io.seq.clone();
        let z = q.z;
        let per_cta = block / spec.lanes;
        for w in 0..m.warps.len() {
            let mut set = vec![(q.pwk, w), (q.pwv.sp, 1)];
            for (d, e) in q.pwv.entries.iter().enumerate() {
                let mask = if d == 0 { z.masks() - 1 } else { 0 };
                set.extend([(e[0], 0), (e[1], z.pcs), (e[2], mask)]);
            }
            set.extend(q.pwv.pad.hot.iter().map(|g| (*g, 0)));
            counts.specials += 1;
            self.token_async(&Token { set, ..Token::default() }).await?;
        }
        for c in 0..launch.grid {
            let mut set = vec![(q.psk, c), (q.psv.last, usize::from(c + 1 == launch.grid))];
            set.extend(q.psv.st.iter().enumerate().map(|(j, g)| (*g, if j < per_cta { LIVE } else { ABSENT })));
            set.extend(q.psv.pad.hot.iter().map(|g| (*g, 0)));
            counts.specials += 1;
            self.token_async(&Token { set, ..Token::default() }).await?;
        }
        // EXEC: from here the host only copies each output record into the next token.
        let r = &q.rec;
        let mut set = vec![(r.kind, FETCH), (r.warp, 0), (r.wi, 0), (r.cta, 0)];
        let mut pending = Pending::default();
        let mut records = Vec::new();
        let mut views = Vec::new();
        let mut seen = Vec::new();
        let exec_start = self.tokens;
        let started = self.clock.map(|c| c());
        let field = |set: &[(Group, usize)], g: Group| set.iter().find(|(x, _)| *x == g).map(|&(_, i)| i);
        let mut by_kind = ByKind::default();
        // Nothing needs each token: the executor may run them back to back.
        let batched =
            self.batch > 1 && !self.lockstep && !self.views && self.clock.is_none() && self.executor.is_some();
        loop {
            if batched {
                pending = self.exec_batched(&set, pending, &mut records, &mut counts.control, limit).await?;
                break;
            }
            let kind = field(&set, r.kind);
            let t0 = self.clock.map(|c| c());
            let out = self.token_async(&Token { set: set.clone(), pending, ..Token::default() }).await?;
            if let (Some(c), Some(t0), Some(k @ (EXEC | CTRL | FETCH))) = (self.clock, t0, kind) {
                by_kind.tokens[k] += 1;
                by_kind.seconds[k] += c() - t0;
            }
            pending = out.pending;
            if kind == Some(EXEC) && self.views {
                let (w, l) = (field(&set, r.warp).unwrap_or(0), field(&set, r.lane).unwrap_or(0));
                seen.push(TokenView {
                    thread: w * spec.lanes + l,
                    block: field(&set, r.pc).unwrap_or(0),
                    slot: field(&set, r.slot).unwrap_or(0),
                    phase: field(&set, r.phase).unwrap_or(0),
                    op: out.op,
                    writes: pending,
                });
            }
            if kind != Some(EXEC) {
                counts.control += 1;
            }
            if kind == Some(CTRL) {
                let get =
                    |g| field(&set, g).ok_or_else(|| RunError::Program("a CTRL record without its fields".into()));
                let record = StepRecord { warp: get(r.warp)?, block: get(r.pc)?, mask: get(r.mask)? as u32 };
                let step = records.len() as u64;
                records.push(record);
                let cta = get(r.cta)?;
                if self.views {
                    views.push(self.view(record, cta, &pending, &out.warp_write, core::mem::take(&mut seen)));
                }
                if self.lockstep {
                    self.lockstep(&mut m, record, cta, &pending, &out.warp_write, step)?;
                }
                if records.len() as u64 >= limit && field(&out.next, r.kind) != Some(DONE) {
                    return Err(MachineError::StepLimit(limit).into());
                }
            }
            set = out.next;
            match field(&set, r.kind) {
                Some(DONE) => break,
                Some(_) => {}
                None => {
                    return Err(RunError::Program(alloc::format!(
                        "the layers gave no next record after a {} token (a stack deeper than {}?)",
                        ["EXEC", "CTRL", "FETCH", "DONE"][kind.unwrap_or(0).min(3)],
                        control::DEPTH
                    )))
                }
            }
        }
        let exec_seconds = self.clock.zip(started).map(|(c, t)| c() - t);
        counts.exec = self.tokens - exec_start - counts.control;
        counts.val = spec.global_words as u64;
        // VAL: read every global word back (the first also applies the last pending writes).
        let mut global = Vec::with_capacity(spec.global_words);
        for i in 0..spec.global_words {
            let out = self.token_async(&Token { pending, query: Some(i), ..Token::default() }).await?;
            pending = Pending::default();
            global.push(out.val.ok_or_else(|| RunError::Program(alloc::format!("no VAL for word {i}")))?);
        }
        Ok(Report {
            steps: records.len() as u64,
            tokens: self.tokens - start,
            exec_seconds,
            by_kind: self.clock.map(|_| by_kind),
            counts,
            global,
            records,
            views,
            device_seconds: self.executor.as_mut().and_then(|e| e.device_seconds()),
        })
    }

    /// The EXEC phase on the executor, `self.batch` tokens per call, from the first record
    /// `set` and `pending` to DONE; returns the last token's pending writes (for VAL).
    async fn exec_batched(
        &mut self,
        set: &[(Group, usize)],
        pending: Pending,
        records: &mut Vec<StepRecord>,
        control: &mut u64,
        limit: u64,
    ) -> Result<Pending, RunError> {
        let (io, batch) = (&self.c.io, self.batch);
        let (q, id) = (&io.seq, |g: Group| g.id as u32);
        let mut copies: Vec<(u32, u32, u32)> = q.carry.iter().map(|&(f, t)| (id(f), id(t), NO_KEY)).collect();
        for ((ok, ov), (pk, pv)) in pending_groups(io, true).into_iter().zip(pending_groups(io, false)) {
            copies.push((id(ok), id(pk), NO_KEY));
            copies.extend(ov.iter().zip(pv).map(|(&f, &t)| (id(f), id(t), id(ok))));
        }
        let r = &q.rec;
        let plan = ExecPlan {
            copies,
            kind: id(r.kind),
            warp: id(r.warp),
            pc: id(r.pc),
            mask: id(r.mask),
            exec: EXEC as u32,
            ctrl: CTRL as u32,
            done: DONE as u32,
        };
        let mut input: Vec<(u32, u32)> = set.iter().map(|&(g, h)| (id(g), h as u32)).collect();
        let writes = [pending.reg, pending.global, pending.shared];
        for ((k, v), w) in pending_groups(io, false).into_iter().zip(writes) {
            if let Some((key, value)) = w {
                input.push((id(k), key as u32));
                input.extend(v.iter().enumerate().map(|(i, g)| (id(*g), (value >> (4 * i)) & 15)));
            }
        }
        let exec = self.executor.as_mut().ok_or_else(|| RunError::Program("no executor".into()))?;
        loop {
            let left = limit.saturating_sub(records.len() as u64).min(u32::MAX as u64) as u32;
            let b = exec
                .run_batch(&plan, &input, batch, left)
                .ok_or_else(|| RunError::Program("this executor runs one token at a time".into()))?
                .await?;
            self.tokens += b.tokens;
            *control += b.control;
            records.extend(b.records.iter().map(|&(w, pc, m)| StepRecord {
                warp: w as usize,
                block: pc as usize,
                mask: m,
            }));
            let get = |g: Group| b.next.iter().find(|x| x.0 == id(g)).map(|x| x.1);
            match get(r.kind) {
                Some(k) if k == plan.done => {
                    // The VAL phase starts from the last token's pending writes.
                    let mut w = [None; 3];
                    for ((k, v), slot) in pending_groups(io, false).into_iter().zip(&mut w) {
                        if let Some(key) = get(k) {
                            let value =
                                v.iter().enumerate().try_fold(0u32, |acc, (i, g)| Some(acc | get(*g)? << (4 * i)));
                            let value = value.ok_or_else(|| {
                                RunError::Program(alloc::format!("a write to row {key} without a value"))
                            })?;
                            *slot = Some((key as usize, value));
                        }
                    }
                    return Ok(Pending { reg: w[0], global: w[1], shared: w[2] });
                }
                Some(_) => {}
                None => {
                    return Err(RunError::Program(alloc::format!(
                        "the layers gave no next record (a stack deeper than {}?)",
                        control::DEPTH
                    )))
                }
            }
            if records.len() as u64 >= limit {
                return Err(MachineError::StepLimit(limit).into());
            }
            input = b.next;
        }
    }

    /// A register-file copy's word for `row`, with the in-flight write applied.
    fn reg_value(&self, copy: usize, row: usize, pending: &Pending) -> Option<u32> {
        with_pending(pending.reg, row, row_word(self.head(self.c.heads.regs[copy]), row))
    }

    fn global_value(&self, i: usize, pending: &Pending) -> Option<u32> {
        with_pending(pending.global, i, row_word(self.head(self.c.heads.global), i))
    }

    fn shared_value(&self, row: usize, pending: &Pending) -> Option<u32> {
        with_pending(pending.shared, row, row_word(self.head(self.c.heads.shared), row))
    }

    /// Warp `w`'s SIMT stack decoded from its state row (or from the write in flight).
    fn stack(&self, w: usize, write: &Option<(usize, Vec<Option<usize>>)>) -> Option<Vec<Entry>> {
        let q = &self.c.io.seq;
        let groups = q.wr.groups();
        let hot: Vec<Option<usize>> = match write {
            Some((x, hot)) if *x == w => hot.clone(),
            _ => {
                let row = self.head(self.c.heads.warp).row(w);
                let mut at = 0;
                groups
                    .iter()
                    .map(|g| {
                        let h = (0..g.len).find(|&i| row[at + i] == M);
                        at += g.len;
                        h
                    })
                    .collect()
            }
        };
        let sp = hot[0]?;
        (0..sp)
            .map(|d| {
                let (pc, join, mask) = (hot[1 + 3 * d]?, hot[2 + 3 * d]?, hot[3 + 3 * d]?);
                Some(Entry { pc, join: (join < q.z.pcs).then_some(join), mask: mask as u32 })
            })
            .collect()
    }

    fn view(
        &self,
        record: StepRecord,
        cta: usize,
        pending: &Pending,
        write: &Option<(usize, Vec<Option<usize>>)>,
        tokens: Vec<TokenView>,
    ) -> StepView {
        let spec = self.c.spec;
        let regs = (0..spec.lanes)
            .map(|l| {
                let base = (record.warp * spec.lanes + l) * self.c.rows;
                (0..spec.regs).map(|r| self.reg_value(0, base + r, pending).unwrap_or(u32::MAX)).collect()
            })
            .collect();
        let global = (0..spec.global_words).map(|i| self.global_value(i, pending).unwrap_or(u32::MAX)).collect();
        let shared = (0..spec.shared_words)
            .map(|i| self.shared_value(cta * spec.shared_words + i, pending).unwrap_or(u32::MAX))
            .collect();
        let stack = self.stack(record.warp, write).unwrap_or_default();
        StepView { record, regs, global, shared, stack, tokens }
    }

    /// The opcode each ROM row holds, decoded from the ROM head's state rows.
    pub fn rom_ops(&self) -> Vec<Option<Op>> {
        let head = self.head(self.c.heads.rom);
        let n = self.c.ops.len();
        (0..self.c.rom_rows)
            .map(|row| {
                let hot: Vec<usize> = (0..n).filter(|&i| head.row(row)[i] == M).collect();
                (hot.len() == 1).then(|| self.c.ops[hot[0]])
            })
            .collect()
    }

    fn lockstep(
        &self,
        m: &mut Machine,
        record: StepRecord,
        cta: usize,
        pending: &Pending,
        write: &Option<(usize, Vec<Option<usize>>)>,
        step: u64,
    ) -> Result<(), RunError> {
        let bad = |what: String| Err(RunError::Lockstep { step, what });
        let want = m.step()?;
        if want != Some(record) {
            return bad(alloc::format!("ran {record:?}, the interpreter {want:?}"));
        }
        let spec = self.c.spec;
        let iw = &m.warps[record.warp];
        for l in 0..spec.lanes {
            for r in 0..spec.regs {
                let row = (record.warp * spec.lanes + l) * self.c.rows + r;
                for copy in 0..self.c.heads.regs.len() {
                    let got = self.reg_value(copy, row, pending);
                    if got != Some(iw.regs[l][r]) {
                        return bad(alloc::format!(
                            "warp {} lane {l} r{r} (copy {copy}): {got:?}, want {}",
                            record.warp,
                            iw.regs[l][r]
                        ));
                    }
                }
            }
        }
        for (i, &want) in m.global.iter().enumerate() {
            let got = self.global_value(i, pending);
            if got != Some(want) {
                return bad(alloc::format!("global word {i}: {got:?}, want {want}"));
            }
        }
        if m.warps.get(m.current).is_some_and(|w| w.cta == cta) {
            for (i, &want) in m.shared.iter().enumerate() {
                let row = cta * spec.shared_words + i;
                let got = self.shared_value(row, pending);
                if got != Some(want) {
                    return bad(alloc::format!("shared word {i} of CTA {cta}: {got:?}, want {want}"));
                }
            }
        }
        for (w, theirs) in m.warps.iter().enumerate() {
            let ours = self.stack(w, write);
            if ours.as_ref() != Some(&theirs.stack) {
                return bad(alloc::format!("warp {w}'s SIMT stack (state row) {ours:?}, want {:?}", theirs.stack));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::suite::kernels;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn suite_kernels_run_on_the_compiled_layers_in_lockstep() {
        let spec = MachineSpec::default();
        let c = Compiled::new(spec).unwrap();
        let mut r = Runner::new(c);
        let names: Vec<String> =
            std::env::var("QWENGPU_KERNELS").map(|s| s.split(',').map(String::from).collect()).unwrap_or_default();
        let mut failed = Vec::new();
        for k in kernels().into_iter().filter(|k| names.is_empty() || names.iter().any(|n| n == k.name)) {
            let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
            match r.launch(&kernel.program, &p.memory, &p.launch, 100_000) {
                Ok(report) if p.read_arrays(&report.global) == k.expected(&p) => {
                    std::println!("{:16} {} steps {} tokens", k.name, report.steps, report.tokens)
                }
                Ok(_) => failed.push(alloc::format!("{}: wrong arrays", k.name)),
                Err(e) => failed.push(alloc::format!("{}: {e}", k.name)),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        if names.is_empty() {
            assert!(kernels().len() >= 49);
        }
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::suite::kernels;
    use core::sync::atomic::{AtomicU64, Ordering};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    static TICKS: AtomicU64 = AtomicU64::new(0);
    /// A clock that advances one second per reading.
    fn ticks() -> f64 {
        TICKS.fetch_add(1, Ordering::Relaxed) as f64
    }

    /// With a clock, the execution phase's tokens are counted and timed by kind: one CTRL and
    /// one FETCH per step, and the EXEC tokens the counts name, each timed by two readings.
    #[test]
    fn a_clock_times_the_execution_phase_by_token_kind() {
        let spec = MachineSpec::default();
        let mut r = Runner::new(Compiled::new(spec).unwrap());
        let k = kernels().into_iter().find(|k| k.name == "warp_scan").unwrap();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        r.lockstep = false;
        let untimed = r.launch(&kernel.program, &p.memory, &p.launch, 100_000).unwrap();
        assert_eq!(untimed.by_kind, None);
        r.clock = Some(ticks);
        let report = r.launch(&kernel.program, &p.memory, &p.launch, 100_000).unwrap();
        let by = report.by_kind.unwrap();
        assert_eq!(by.tokens, [report.counts.exec, report.steps, report.steps]);
        assert_eq!(by.tokens.iter().sum::<u64>(), report.counts.exec + report.counts.control);
        // Each token is bracketed by two readings one tick apart.
        assert_eq!(by.seconds, by.tokens.map(|n| n as f64));
        assert!(report.exec_seconds.unwrap() >= by.seconds.iter().sum::<f64>());
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod profile {
    use super::*;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::suite::kernels;
    #[test]
    #[ignore]
    fn profile() {
        let spec = MachineSpec::default();
        let mut r = Runner::new(Compiled::new(spec).unwrap());
        r.lockstep = false;
        let mut tokens = 0;
        for k in kernels() {
            let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
            tokens += r.launch(&kernel.program, &p.memory, &p.launch, 100_000).unwrap().tokens;
        }
        let s = &r.c.stream;
        let mut ev: Vec<(u64, usize)> =
            r.c.layers
                .iter()
                .enumerate()
                .filter_map(|(i, l)| if let Layer::Mlp(m) = l { Some((m.evaluated, i)) } else { None })
                .collect();
        ev.sort();
        ev.reverse();
        std::println!("total per token {}", ev.iter().map(|e| e.0).sum::<u64>() / tokens);
        for &(e, i) in &ev[..16] {
            if let Layer::Mlp(m) = &r.c.layers[i] {
                let mut big: Vec<(u32, String)> = m
                    .pivot_sizes(s)
                    .into_iter()
                    .map(|(g, v)| (v.iter().copied().max().unwrap_or(0), s.groups[g].0.clone()))
                    .collect();
                big.sort();
                big.reverse();
                std::println!("layer {i}: {} per token; biggest pivots {:?}", e / tokens, &big[..big.len().min(6)]);
            }
        }
    }
}
