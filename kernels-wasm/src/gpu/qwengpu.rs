//! The compiled qwenGPU layers on the GPU: one dispatch runs one token through every layer
//! (`qwengpu.wgsl`), with the stream's hot groups and the DeltaNet heads' state rows living in
//! GPU buffers. The host feeds the input record and reads the output record back, as the token
//! protocol says; the rows a token wrote come back with it, so the lockstep check against the
//! interpreter reads the GPU's state.
//!
//! `prog` (read-only u32 words) holds the layers: a table of 16 words per layer, then the data.
//! - MLP: `0, pivots at, pivot count, starts at, buckets at, sstarts at, code at, always, end`:
//!   `mlp::MlpLayer`'s arrays as they are (indices inside stay relative to the layer).
//! - Head: `1, key, query, value, out, d_k, d_v, state at, norm, α, β, silu(32), 1/sqrt(d_k)`:
//!   each projection is `G, (group, table at) × G`, a table is `len + 1` word offsets of
//!   `(target, weight bits)` pairs; `out` is `d_v` places `(channel, group, offset)`. The
//!   constants are the CPU's own f32 values.

use super::{storage_bindings, Gpu, GpuError};
use crate::qwengpu::head::{Columns, MemLayer};
use crate::qwengpu::mlp::{MlpLayer, NO_SECOND};
use crate::qwengpu::net::{silu, Layer, State, Stream, StreamError};
use crate::qwengpu::run::{Batch, ExecPlan, LocalFuture, RunError, NO_KEY};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Units firing in one MLP layer, at most.
const FIRED_CAP: usize = 16384;
/// Hot (target, weight) entries of one projection, at most.
const ENTRY_CAP: usize = 1024;
/// State rows written in one token, at most (a token writes one or two).
const ROWS_CAP: usize = 8;
/// Input-record channels, at most.
const MAX_IN: usize = 4096;
/// A batch's copies from one output record to the next input, and CTRL records, at most.
const PLAN_CAP: usize = 1024;
pub const REC_CAP: usize = 4096;
/// Tokens in one submission, at most (two dispatches each).
pub const MAX_BATCH: u32 = 4096;
/// `io`'s header words: the token's outcome (error code, layer, detail, hot groups, rows
/// written), then a batch's request (tokens, records) and outcome (tokens run, control
/// tokens, records, where the next input record is, stopped).
const HEADER: usize = 12;
const WORDS_PER_LAYER: usize = 16;

/// The layers on the GPU, with their state.
pub struct GpuLayers {
    /// A token (`main`), and between a batch's tokens the next input record (`next`).
    pipeline: wgpu::ComputePipeline,
    next: wgpu::ComputePipeline,
    prog: wgpu::Buffer,
    state: wgpu::Buffer,
    mach: wgpu::Buffer,
    scratch: wgpu::Buffer,
    io: wgpu::Buffer,
    groups: usize,
    /// Where `io`'s regions start (words).
    at: IoLayout,
    state_words: usize,
    vec_cap: usize,
    /// Per layer: where its head's rows start in `state`, and its d_v (heads only).
    heads: Vec<Option<(usize, usize)>>,
    /// The dispatches' GPU time since the last [`Self::take_gpu_seconds`] (timestamp queries).
    gpu_seconds: core::cell::Cell<Option<f64>>,
}

/// `io`: the header, the token's hot groups, the state rows it wrote, two input records (a
/// batch alternates), a batch's plan and its CTRL records.
#[derive(Debug, Clone, Copy)]
struct IoLayout {
    touched: usize,
    rows: usize,
    input: usize,
    input2: usize,
    plan: usize,
    records: usize,
    end: usize,
}

impl IoLayout {
    /// `touch_cap`: groups made hot in one token, at most (each group once, the input record's
    /// included); `vec_cap`: the widest head row.
    fn new(touch_cap: usize, vec_cap: usize) -> IoLayout {
        let touched = HEADER;
        let rows = touched + 2 * touch_cap;
        let input = rows + ROWS_CAP * (2 + vec_cap);
        let input2 = input + 1 + 2 * MAX_IN;
        let plan = input2 + 1 + 2 * MAX_IN;
        let records = plan + 1 + 3 * PLAN_CAP + 7;
        IoLayout { touched, rows, input, input2, plan, records, end: records + 3 * REC_CAP }
    }
}

/// What one token left: its hot groups (input record included) and the state rows it wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenOut {
    pub hot: Vec<(u32, u32)>,
    /// (layer, row, the row's d_v values).
    pub rows: Vec<(usize, usize, Vec<f32>)>,
}

fn push_columns(prog: &mut Vec<u32>, cols: &Columns) -> u32 {
    let at = prog.len();
    prog.push(cols.len() as u32);
    prog.extend(core::iter::repeat_n(0, 2 * cols.len()));
    for (c, (g, chans)) in cols.iter().enumerate() {
        let tab = prog.len();
        prog[at + 1 + 2 * c] = *g as u32;
        prog[at + 2 + 2 * c] = tab as u32;
        prog.extend(core::iter::repeat_n(0, chans.len() + 1));
        for (h, entries) in chans.iter().enumerate() {
            prog[tab + h] = prog.len() as u32;
            prog.extend(entries.iter().flat_map(|&(t, w)| [t, w.to_bits()]));
        }
        prog[tab + chans.len()] = prog.len() as u32;
    }
    at as u32
}

fn push_mlp(prog: &mut Vec<u32>, m: &MlpLayer) -> [u32; 9] {
    let at = |words: &[u32], prog: &mut Vec<u32>| {
        let a = prog.len() as u32;
        prog.extend_from_slice(words);
        a
    };
    let pivots: Vec<u32> = m.pivot.iter().flat_map(|&(g, a)| [g, a]).collect();
    let buckets: Vec<u32> = m.buckets.iter().flat_map(|&(g, a)| [g, a]).collect();
    let p = at(&pivots, prog);
    let s = at(&m.starts, prog);
    let b = at(&buckets, prog);
    let ss = at(&m.sstarts, prog);
    let c = at(&m.code, prog);
    [0, p, m.pivot.len() as u32, s, b, ss, c, m.always, m.code.len() as u32]
}

fn push_head(prog: &mut Vec<u32>, h: &MemLayer, state_at: usize) -> [u32; 13] {
    let (k, q, v) = (push_columns(prog, &h.key), push_columns(prog, &h.query), push_columns(prog, &h.value));
    let out = prog.len() as u32;
    prog.extend(h.out.iter().flat_map(|p| [p.ch, p.group, p.offset]));
    let beta = 1.0 / (1.0 + (-32.0f32).exp());
    let scale = 1.0 / (h.d_k as f32).sqrt();
    [
        1,
        k,
        q,
        v,
        out,
        h.d_k as u32,
        h.d_v as u32,
        state_at as u32,
        h.norm.to_bits(),
        h.alpha.to_bits(),
        beta.to_bits(),
        silu(32.0).to_bits(),
        scale.to_bits(),
    ]
}

impl GpuLayers {
    /// Uploads the layers (their state rows start unwritten).
    pub fn new(gpu: &Gpu, s: &Stream, layers: &[Layer]) -> Result<GpuLayers, GpuError> {
        let mut prog = vec![0u32; WORDS_PER_LAYER * layers.len()];
        let (mut state_words, mut vec_cap, mut heads) = (0, 1, Vec::new());
        for (l, layer) in layers.iter().enumerate() {
            let desc: Vec<u32> = match layer {
                Layer::Mlp(m) => push_mlp(&mut prog, m).to_vec(),
                Layer::Mem(h) => {
                    let d = push_head(&mut prog, h, state_words).to_vec();
                    heads.push(Some((state_words, h.d_v)));
                    state_words += h.d_k * h.d_v;
                    vec_cap = vec_cap.max(h.d_v);
                    d
                }
            };
            if matches!(layer, Layer::Mlp(_)) {
                heads.push(None);
            }
            prog[WORDS_PER_LAYER * l..WORDS_PER_LAYER * l + desc.len()].copy_from_slice(&desc);
        }
        let groups = s.groups.len();
        let touch_cap = groups + MAX_IN + 1;
        let at = IoLayout::new(touch_cap, vec_cap);
        let fired_n = 3 * FIRED_CAP;
        let (k_at, q_at) = (fired_n + 1, fired_n + 1 + 2 * ENTRY_CAP);
        let (e_at, vec_at) = (q_at + 2 * ENTRY_CAP, q_at + 4 * ENTRY_CAP);
        let header = alloc::format!(
            "const LAYERS: u32 = {}u;\nconst LAYER_TABLE: u32 = 0u;\nconst GROUPS: u32 = {groups}u;\n\
             const NO_SECOND: u32 = {NO_SECOND}u;\nconst NO_KEY: u32 = {NO_KEY}u;\nconst TOUCH_CAP: u32 = {touch_cap}u;\n\
             const FIRED_CAP: u32 = {FIRED_CAP}u;\nconst FIRED_N: u32 = {fired_n}u;\n\
             const ENTRY_CAP: u32 = {ENTRY_CAP}u;\nconst K_AT: u32 = {k_at}u;\nconst Q_AT: u32 = {q_at}u;\n\
             const E_AT: u32 = {e_at}u;\nconst VEC_AT: u32 = {vec_at}u;\nconst VEC_CAP: u32 = {vec_cap}u;\n\
             const OUT_AT: u32 = 0u;\nconst BATCH_TOKENS: u32 = 5u;\nconst BATCH_MAX_RECORDS: u32 = 6u;\n\
             const BATCH_RAN: u32 = 7u;\nconst BATCH_CONTROL: u32 = 8u;\nconst BATCH_RECORDS: u32 = 9u;\n\
             const BATCH_NEXT: u32 = 10u;\nconst BATCH_STOP: u32 = 11u;\nconst TOUCHED_AT: u32 = {}u;\nconst ROWS_AT: u32 = {}u;\n\
             const ROWS_CAP: u32 = {ROWS_CAP}u;\nconst IN_AT: u32 = {}u;\nconst IN2_AT: u32 = {}u;\n\
             const PLAN_AT: u32 = {}u;\nconst PLAN_CAP: u32 = {PLAN_CAP}u;\nconst REC_AT: u32 = {}u;\n",
            layers.len(),
            at.touched,
            at.rows,
            at.input,
            at.input2,
            at.plan,
            at.records
        );
        let source: String = [header.as_str(), include_str!("exact.wgsl"), include_str!("qwengpu.wgsl")].concat();
        // Both entry points share one layout, so one bind group serves a batch's pass.
        let [pipeline, next] = gpu.pipelines("qwengpu", source, &storage_bindings(5), ["main", "next"]);
        let words = |v: &[u32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let this = GpuLayers {
            pipeline,
            next,
            prog: gpu.storage("qwengpu layers", &words(&prog))?,
            state: gpu.read_write("qwengpu state rows", state_words)?,
            mach: gpu.read_write("qwengpu stream", groups + 1 + touch_cap)?,
            scratch: gpu.read_write("qwengpu scratch", vec_at + 3 * vec_cap)?,
            io: gpu.read_write("qwengpu io", at.end)?,
            groups,
            at,
            state_words,
            vec_cap,
            heads,
            gpu_seconds: core::cell::Cell::new(None),
        };
        this.reset(gpu);
        Ok(this)
    }

    /// The GPU time of the tokens since the last call (None without timestamp queries).
    pub fn take_gpu_seconds(&self) -> Option<f64> {
        self.gpu_seconds.take()
    }

    /// A fresh machine: every state row unwritten, every group cold.
    pub fn reset(&self, gpu: &Gpu) {
        gpu.queue.write_buffer(&self.state, 0, &vec![0u8; 4 * self.state_words.max(1)]);
        let mut mach = vec![-1i32; self.groups];
        mach.push(0);
        gpu.queue.write_buffer(&self.mach, 0, &mach.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    }

    /// Writes words into `io` from word `at`.
    fn put(&self, gpu: &Gpu, at: usize, words: &[u32]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        gpu.queue.write_buffer(&self.io, 4 * at as u64, &bytes);
    }

    /// An input record (count, then the pairs) into `io[at..]`.
    fn put_input(&self, gpu: &Gpu, at: usize, inputs: &[(u32, u32)]) -> Result<(), GpuError> {
        if inputs.len() > MAX_IN {
            let what = alloc::format!("an input record of {} channels", inputs.len());
            return Err(GpuError::TooLarge { what, need: inputs.len() as u64, limit: MAX_IN as u64 });
        }
        let mut record = vec![inputs.len() as u32];
        record.extend(inputs.iter().flat_map(|&(g, h)| [g, h]));
        self.put(gpu, at, &record);
        Ok(())
    }

    /// Runs the dispatch and reads `io[..words]` back: the header's outcome as a result.
    async fn run(
        &self,
        gpu: &Gpu,
        steps: &[&wgpu::ComputePipeline],
        words: usize,
    ) -> Result<Result<Vec<u32>, StreamError>, GpuError> {
        let bindings = [&self.prog, &self.state, &self.mach, &self.scratch, &self.io];
        let steps: Vec<_> = steps.iter().map(|&p| (p, [1, 1, 1])).collect();
        let done = gpu.dispatch_steps(&steps, &bindings, 4 * words as u64).await?;
        if let Some(ns) = done.gpu_ns {
            self.gpu_seconds.set(Some(self.gpu_seconds.get().unwrap_or(0.0) + ns * 1e-9));
        }
        let out: Vec<u32> = done.bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let (code, layer, detail) = (out[0], out[1] as usize, out[2]);
        let what = match code {
            0 => return Ok(Ok(out)),
            1 => alloc::format!("a second value written into group {detail}"),
            2 => alloc::format!("a gate of {} between SiLU's exact cut-offs", f32::from_bits(detail)),
            3 => alloc::format!("a norm of {} outside the exact range", f32::from_bits(detail)),
            5 => alloc::format!("over {detail} records in one token: the layers are corrupt"),
            6 => "the layers gave no next record".into(),
            7 => alloc::format!("a pending write without its value (group {detail} cold)"),
            _ => alloc::format!("a GPU scratch list is full (kind {detail})"),
        };
        Ok(Err(StreamError { layer, what }))
    }

    /// One token: `inputs` are the input record's hot channels (group, offset); the constant
    /// channel is set by the shader.
    pub async fn token(&self, gpu: &Gpu, inputs: &[(u32, u32)]) -> Result<Result<TokenOut, StreamError>, GpuError> {
        self.put_input(gpu, self.at.input, inputs)?;
        self.put(gpu, 5, &[0]);
        let out = match self.run(gpu, &[&self.pipeline], self.at.input).await? {
            Ok(out) => out,
            Err(e) => return Ok(Err(e)),
        };
        let hot =
            (0..out[3] as usize).map(|i| (out[self.at.touched + 2 * i], out[self.at.touched + 2 * i + 1])).collect();
        let rows = (0..out[4] as usize)
            .map(|n| {
                let at = self.at.rows + n * (2 + self.vec_cap);
                let (l, r) = (out[at] as usize, out[at + 1] as usize);
                let dv = self.heads.get(l).copied().flatten().map_or(0, |h| h.1);
                (l, r, (0..dv).map(|j| f32::from_bits(out[at + 2 + j])).collect())
            })
            .collect();
        Ok(Ok(TokenOut { hot, rows }))
    }

    /// Up to `tokens` tokens in one dispatch (see [`Executor::run_batch`]): from the input
    /// record `input`, each next one made on the GPU by `plan`'s copies.
    pub async fn batch(
        &self,
        gpu: &Gpu,
        plan: &ExecPlan,
        input: &[(u32, u32)],
        tokens: u32,
        records: u32,
    ) -> Result<Result<Batch, StreamError>, GpuError> {
        if plan.copies.len() > PLAN_CAP {
            let what = alloc::format!("a plan of {} copies", plan.copies.len());
            return Err(GpuError::TooLarge { what, need: plan.copies.len() as u64, limit: PLAN_CAP as u64 });
        }
        let mut words = vec![plan.copies.len() as u32];
        words.extend(plan.copies.iter().flat_map(|&(f, t, k)| [f, t, k]));
        words.resize(1 + 3 * PLAN_CAP, 0);
        words.extend([plan.kind, plan.warp, plan.pc, plan.mask, plan.exec, plan.ctrl, plan.done]);
        self.put(gpu, self.at.plan, &words);
        self.put_input(gpu, self.at.input, input)?;
        let (tokens, records) = (tokens.clamp(1, MAX_BATCH), records.clamp(1, REC_CAP as u32));
        self.put(gpu, 5, &[tokens, records, 0, 0, 0, self.at.input as u32, 0]);
        let steps: Vec<&wgpu::ComputePipeline> = (0..tokens).flat_map(|_| [&self.pipeline, &self.next]).collect();
        let out = match self.run(gpu, &steps, self.at.end).await? {
            Ok(out) => out,
            Err(e) => return Ok(Err(e)),
        };
        let (ran, control, recs, next) = (out[7], out[8], out[9] as usize, out[10] as usize);
        let n = out[next] as usize;
        Ok(Ok(Batch {
            tokens: ran as u64,
            control: control as u64,
            records: (0..recs).map(|i| self.at.records + 3 * i).map(|r| (out[r], out[r + 1], out[r + 2])).collect(),
            next: (0..n).map(|i| (out[next + 1 + 2 * i], out[next + 2 + 2 * i])).collect(),
        }))
    }

    /// [`Self::token`] driving a CPU-side [`State`] and the heads' rows: the input record is
    /// what `st` holds, and afterwards `st` and the heads hold what the GPU computed.
    pub async fn forward(
        &self,
        gpu: &Gpu,
        s: &Stream,
        st: &mut State,
        layers: &mut [Layer],
    ) -> Result<Result<(), StreamError>, GpuError> {
        // The input record: every hot group but the constant, which the shader sets.
        let inputs: Vec<(u32, u32)> =
            st.touched().iter().filter(|&&g| g != 0).filter_map(|&g| Some((g, st.hot[g as usize]? as u32))).collect();
        let out = match self.token(gpu, &inputs).await? {
            Err(e) => return Ok(Err(e)),
            Ok(out) => out,
        };
        for &(g, h) in &out.hot {
            if st.hot[g as usize].is_none() {
                st.set(s, s.groups[g as usize].1 + h as usize);
            }
        }
        for (l, r, row) in out.rows {
            if let Some(Layer::Mem(head)) = layers.get_mut(l) {
                head.state[r * head.d_v..(r + 1) * head.d_v].copy_from_slice(&row);
            }
        }
        Ok(Ok(()))
    }
}

/// A GPU call as the runner's future: natively finished here (each read-back blocks), in the
/// page left to the browser's event loop.
fn for_runner<'a, T: 'a>(
    call: impl core::future::Future<Output = Result<Result<T, StreamError>, GpuError>> + 'a,
) -> LocalFuture<'a, Result<T, RunError>> {
    let run = async move {
        match call.await {
            Ok(result) => Ok(result?),
            Err(e) => Err(RunError::Program(alloc::format!("GPU: {e}"))),
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    return alloc::boxed::Box::pin(core::future::ready(super::block_on(run)));
    #[cfg(target_arch = "wasm32")]
    return alloc::boxed::Box::pin(run);
}

/// The GPU as a [`Runner`](crate::qwengpu::run::Runner)'s executor. `G` is how the caller
/// holds its [`Gpu`] (a reference natively, an `Rc` in the page). Natively each token blocks
/// until its read-back, so `Runner::launch` works; in the browser use `Runner::launch_async`.
pub struct GpuExecutor<G> {
    pub gpu: G,
    pub layers: GpuLayers,
}

impl<G: core::ops::Deref<Target = Gpu>> GpuExecutor<G> {
    /// Uploads the compiled machine's layers to `gpu`.
    pub fn new(gpu: G, c: &crate::qwengpu::compiled::Compiled) -> Result<Self, GpuError> {
        let layers = GpuLayers::new(&gpu, &c.stream, &c.layers)?;
        Ok(GpuExecutor { gpu, layers })
    }
}

impl<G: core::ops::Deref<Target = Gpu>> crate::qwengpu::run::Executor for GpuExecutor<G> {
    fn reset(&mut self) {
        self.layers.reset(&self.gpu);
    }

    fn device_seconds(&mut self) -> Option<f64> {
        self.layers.take_gpu_seconds()
    }

    fn forward<'a>(
        &'a mut self,
        s: &'a Stream,
        st: &'a mut State,
        layers: &'a mut [Layer],
    ) -> LocalFuture<'a, Result<(), RunError>> {
        for_runner(self.layers.forward(&self.gpu, s, st, layers))
    }

    fn run_batch<'a>(
        &'a mut self,
        plan: &'a ExecPlan,
        input: &'a [(u32, u32)],
        tokens: u32,
        records: u32,
    ) -> Option<LocalFuture<'a, Result<Batch, RunError>>> {
        Some(for_runner(self.layers.batch(&self.gpu, plan, input, tokens, records)))
    }
}
