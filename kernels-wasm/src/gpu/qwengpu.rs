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

use super::{Gpu, GpuError};
use crate::qwengpu::head::{Columns, MemLayer};
use crate::qwengpu::mlp::{MlpLayer, NO_SECOND};
use crate::qwengpu::net::{silu, Layer, State, Stream, StreamError};
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
const WORDS_PER_LAYER: usize = 16;

/// The layers on the GPU, with their state.
pub struct GpuLayers {
    pipeline: wgpu::ComputePipeline,
    prog: wgpu::Buffer,
    state: wgpu::Buffer,
    mach: wgpu::Buffer,
    scratch: wgpu::Buffer,
    io: wgpu::Buffer,
    groups: usize,
    /// Groups made hot in one token, at most: each group once (a failed write stops the
    /// token), plus the input record.
    touch_cap: usize,
    state_words: usize,
    vec_cap: usize,
    /// Per layer: where its head's rows start in `state`, and its d_v (heads only).
    heads: Vec<Option<(usize, usize)>>,
    /// The dispatches' GPU time since the last [`Self::take_gpu_seconds`] (timestamp queries).
    gpu_seconds: core::cell::Cell<Option<f64>>,
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
        let fired_n = 3 * FIRED_CAP;
        let (k_at, q_at) = (fired_n + 1, fired_n + 1 + 2 * ENTRY_CAP);
        let (e_at, vec_at) = (q_at + 2 * ENTRY_CAP, q_at + 4 * ENTRY_CAP);
        let touched_at = 5;
        let rows_at = touched_at + 2 * touch_cap;
        let in_at = rows_at + ROWS_CAP * (2 + vec_cap);
        let header = alloc::format!(
            "const LAYERS: u32 = {}u;\nconst LAYER_TABLE: u32 = 0u;\nconst GROUPS: u32 = {groups}u;\n\
             const NO_SECOND: u32 = {NO_SECOND}u;\nconst TOUCH_CAP: u32 = {touch_cap}u;\n\
             const FIRED_CAP: u32 = {FIRED_CAP}u;\nconst FIRED_N: u32 = {fired_n}u;\n\
             const ENTRY_CAP: u32 = {ENTRY_CAP}u;\nconst K_AT: u32 = {k_at}u;\nconst Q_AT: u32 = {q_at}u;\n\
             const E_AT: u32 = {e_at}u;\nconst VEC_AT: u32 = {vec_at}u;\nconst VEC_CAP: u32 = {vec_cap}u;\n\
             const OUT_AT: u32 = 0u;\nconst TOUCHED_AT: u32 = {touched_at}u;\nconst ROWS_AT: u32 = {rows_at}u;\n\
             const ROWS_CAP: u32 = {ROWS_CAP}u;\nconst IN_AT: u32 = {in_at}u;\n",
            layers.len()
        );
        let source: String = [header.as_str(), include_str!("exact.wgsl"), include_str!("qwengpu.wgsl")].concat();
        let desc =
            wgpu::ShaderModuleDescriptor { label: Some("qwengpu"), source: wgpu::ShaderSource::Wgsl(source.into()) };
        let module = gpu.device.create_shader_module(desc);
        let pipeline = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("qwengpu"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let words = |v: &[u32]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let rw = |label: &str, bytes: usize| -> Result<wgpu::Buffer, GpuError> {
            gpu.check_binding(label, bytes as u64)?;
            Ok(gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }))
        };
        let this = GpuLayers {
            pipeline,
            prog: gpu.storage("qwengpu layers", &words(&prog))?,
            state: rw("qwengpu state rows", 4 * state_words.max(1))?,
            mach: rw("qwengpu stream", 4 * (groups + 1 + touch_cap))?,
            scratch: rw("qwengpu scratch", 4 * (vec_at + 3 * vec_cap))?,
            io: rw("qwengpu io", 4 * (in_at + 1 + 2 * MAX_IN))?,
            groups,
            touch_cap,
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

    /// One token: `inputs` are the input record's hot channels (group, offset); the constant
    /// channel is set by the shader.
    pub async fn token(&self, gpu: &Gpu, inputs: &[(u32, u32)]) -> Result<Result<TokenOut, StreamError>, GpuError> {
        if inputs.len() > MAX_IN {
            let what = alloc::format!("an input record of {} channels", inputs.len());
            return Err(GpuError::TooLarge { what, need: inputs.len() as u64, limit: MAX_IN as u64 });
        }
        let in_at = 5 + 2 * self.touch_cap + ROWS_CAP * (2 + self.vec_cap);
        let mut record = vec![inputs.len() as u32];
        record.extend(inputs.iter().flat_map(|&(g, h)| [g, h]));
        let bytes: Vec<u8> = record.iter().flat_map(|w| w.to_le_bytes()).collect();
        gpu.queue.write_buffer(&self.io, 4 * in_at as u64, &bytes);
        let bindings = [&self.prog, &self.state, &self.mach, &self.scratch, &self.io];
        let done = gpu.dispatch(&self.pipeline, &bindings, [1, 1, 1], 4 * in_at as u64).await?;
        if let Some(ns) = done.gpu_ns {
            self.gpu_seconds.set(Some(self.gpu_seconds.get().unwrap_or(0.0) + ns * 1e-9));
        }
        let out = done.bytes;
        let word = |i: usize| u32::from_le_bytes([out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]]);
        let (code, layer, detail) = (word(0), word(1) as usize, word(2));
        if code != 0 {
            let what = match code {
                1 => alloc::format!("a second value written into group {detail}"),
                2 => alloc::format!("a gate of {} between SiLU's exact cut-offs", f32::from_bits(detail)),
                3 => alloc::format!("a norm of {} outside the exact range", f32::from_bits(detail)),
                5 => alloc::format!("over {detail} records in one token: the layers are corrupt"),
                _ => alloc::format!("a GPU scratch list is full (kind {detail})"),
            };
            return Ok(Err(StreamError { layer, what }));
        }
        let hot = (0..word(3) as usize).map(|i| (word(5 + 2 * i), word(6 + 2 * i))).collect();
        let rows_at = 5 + 2 * self.touch_cap;
        let rows = (0..word(4) as usize)
            .map(|n| {
                let at = rows_at + n * (2 + self.vec_cap);
                let (l, r) = (word(at) as usize, word(at + 1) as usize);
                let dv = self.heads.get(l).copied().flatten().map_or(0, |h| h.1);
                (l, r, (0..dv).map(|j| f32::from_bits(word(at + 2 + j))).collect())
            })
            .collect();
        Ok(Ok(TokenOut { hot, rows }))
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

/// The GPU as a [`Runner`](crate::qwengpu::run::Runner)'s executor. `G` is how the caller
/// holds its [`Gpu`] (a reference natively, an `Rc` in the page). Natively each token blocks
/// until its read-back, so `Runner::launch` works; in the browser use `Runner::launch_async`.
pub struct GpuExecutor<G> {
    pub gpu: G,
    pub layers: GpuLayers,
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
    ) -> crate::qwengpu::run::LocalFuture<'a, Result<(), crate::qwengpu::run::RunError>> {
        let run = async move {
            match self.layers.forward(&self.gpu, s, st, layers).await {
                Ok(result) => Ok(result?),
                Err(e) => Err(crate::qwengpu::run::RunError::Program(alloc::format!("GPU: {e}"))),
            }
        };
        #[cfg(not(target_arch = "wasm32"))]
        return alloc::boxed::Box::pin(core::future::ready(super::block_on(run)));
        #[cfg(target_arch = "wasm32")]
        return alloc::boxed::Box::pin(run);
    }
}
