//! A Gated DeltaNet layer of the second machine on the GPU (`deltanet.wgsl`): the first piece of
//! the second design's forward pass on WebGPU (issue #22, `docs/qwengpu-second-machine.md` §33).
//! The weights and the recurrent state live in GPU buffers; a step uploads the layer's input,
//! runs three dispatches in one pass and reads the output back, with the CPU's bits
//! ([`crate::qwengpu::deltanet::DeltaNet::step`]) or an error naming the step that could not
//! promise them.
//!
//! `w` (read-only words): the row table of the stacked projections `[W_qkv; W_z; W_b; W_a]`
//! (`rows + 1` absolute offsets), the row table of `W_out` (`d_model + 1`), the rows' `(column,
//! weight bits)` pairs in column order, then `a_log`, `dt_bias` (a word a head), the norm's
//! `d_v` weights, ε, `1/√d_k` and the keys' `1e-6`. The constants are the CPU's own f32 values.

use super::{Gpu, GpuError};
use crate::qwengpu::deltanet::{DeltaNetWeights, Matrix, CONV};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

const WORKGROUP: usize = 64;
/// The outcome's words before `y` in `out`.
const HEADER: usize = 4;
/// Tokens whose outputs are read back together, at most.
pub const CHUNK: usize = 256;

/// A DeltaNet layer on the GPU, with its state.
pub struct GpuDeltaNet {
    project: wgpu::ComputePipeline,
    heads_pipeline: wgpu::ComputePipeline,
    output: wgpu::ComputePipeline,
    w: wgpu::Buffer,
    state: wgpu::Buffer,
    work: wgpu::Buffer,
    out: wgpu::Buffer,
    d_model: usize,
    rows: usize,
    heads: usize,
    state_len: usize,
}

/// Appends `m`'s rows, each in column order, to `entries` (absolute offsets into `w`, which
/// starts `base` words before `entries`), and returns each row's start plus the end.
fn push_rows(m: &Matrix, base: usize, entries: &mut Vec<u32>, starts: &mut Vec<u32>) {
    let mut rows: Vec<Vec<(u32, f32)>> = vec![Vec::new(); m.rows()];
    // `triplets` runs column by column, so each row comes out in column order.
    for (r, c, v) in m.triplets() {
        rows[r].push((c as u32, v));
    }
    for row in rows {
        starts.push((base + entries.len()) as u32);
        entries.extend(row.iter().flat_map(|&(c, v)| [c, v.to_bits()]));
    }
}

fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

impl GpuDeltaNet {
    /// Uploads a layer (its state zero, as [`DeltaNet::new`](crate::qwengpu::deltanet::DeltaNet::new)
    /// leaves it). Only identity convolution taps are supported: every machine layer has them.
    pub fn new(gpu: &Gpu, w: &DeltaNetWeights) -> Result<GpuDeltaNet, GpuError> {
        if !w.sizes_agree() {
            return Err(GpuError::Unsupported("a DeltaNet whose tensors disagree with its shape".into()));
        }
        let identity = w.conv.chunks_exact(CONV).all(|t| t[..CONV - 1].iter().all(|&t| t == 0.0) && t[CONV - 1] == 1.0);
        if !identity {
            return Err(GpuError::Unsupported("a DeltaNet convolution with other taps than (0, 0, 0, 1)".into()));
        }
        let (d, heads, dk, dv) = (w.d_model, w.heads, w.d_k, w.d_v);
        let channels = w.channels();
        let rows = channels + heads * dv + 2 * heads;
        // The row tables, then the entries, then the vectors.
        let tables = (rows + 1) + (d + 1);
        let (mut entries, mut stacked, mut out_rows) = (Vec::new(), Vec::new(), Vec::new());
        for m in [&w.w_qkv, &w.w_z, &w.w_b, &w.w_a] {
            push_rows(m, tables, &mut entries, &mut stacked);
        }
        stacked.push((tables + entries.len()) as u32);
        push_rows(&w.w_out, tables, &mut entries, &mut out_rows);
        out_rows.push((tables + entries.len()) as u32);
        let vec_table = tables + entries.len();
        let constants = [w.eps, 1.0 / (dk as f32).sqrt(), 1e-6f32];
        let words: Vec<u32> = stacked
            .into_iter()
            .chain(out_rows)
            .chain(entries)
            .chain(w.a_log.iter().chain(&w.dt_bias).chain(&w.norm).chain(&constants).map(|v| v.to_bits()))
            .collect();
        if words.len() > u32::MAX as usize {
            let what = String::from("a DeltaNet layer's weights (words)");
            return Err(GpuError::TooLarge { what, need: words.len() as u64, limit: u32::MAX as u64 });
        }
        let mid_at = d;
        let hot_at = mid_at + rows;
        let o_at = hot_at + heads * 4 * dk;
        let g_at = o_at + heads * dv;
        let work_words = g_at + heads * dv;
        let header = alloc::format!(
            "const D: u32 = {d}u;\nconst ROWS: u32 = {rows}u;\nconst CHANNELS: u32 = {channels}u;\n\
             const HEADS: u32 = {heads}u;\nconst DK: u32 = {dk}u;\nconst DV: u32 = {dv}u;\n\
             const ROW_TABLE: u32 = 0u;\nconst OUT_TABLE: u32 = {}u;\nconst VEC_TABLE: u32 = {vec_table}u;\n\
             const X_AT: u32 = 0u;\nconst MID_AT: u32 = {mid_at}u;\nconst HOT_AT: u32 = {hot_at}u;\n\
             const O_AT: u32 = {o_at}u;\nconst G_AT: u32 = {g_at}u;\n",
            rows + 1
        );
        let source: String = [header.as_str(), include_str!("exact.wgsl"), include_str!("deltanet.wgsl")].concat();
        let [project, heads_pipeline, output] = gpu.pipelines("deltanet", source, 4, ["project", "heads", "output"]);
        let rw = |label: &str, words: usize| -> Result<wgpu::Buffer, GpuError> {
            let bytes = 4 * words.max(1) as u64;
            gpu.check_binding(label, bytes)?;
            Ok(gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }))
        };
        let state_len = heads * dk * dv;
        Ok(GpuDeltaNet {
            project,
            heads_pipeline,
            output,
            w: gpu.storage("deltanet weights", &words_to_bytes(&words))?,
            state: rw("deltanet state", state_len)?,
            work: rw("deltanet work", work_words)?,
            out: rw("deltanet output", HEADER + d)?,
            d_model: d,
            rows,
            heads,
            state_len,
        })
    }

    /// One token: updates the state and returns the layer's output, as `DeltaNet::step`.
    pub async fn step(&self, gpu: &Gpu, x: &[f32]) -> Result<Vec<f32>, GpuError> {
        Ok(self.steps(gpu, &[x]).await?.pop().unwrap_or_default())
    }

    /// Consecutive tokens, each one's output: a pass each, submitted without waiting, the
    /// outputs read back [`CHUNK`] tokens at a time (a wait per token costs more than its work).
    /// On an error nothing after the token that raised it is returned; the state has run on to
    /// the end of its chunk.
    pub async fn steps(&self, gpu: &Gpu, xs: &[&[f32]]) -> Result<Vec<Vec<f32>>, GpuError> {
        if let Some(x) = xs.iter().find(|x| x.len() != self.d_model) {
            let why = alloc::format!("an input of {} channels for a layer of {}", x.len(), self.d_model);
            return Err(GpuError::Unsupported(why));
        }
        let out_bytes = 4 * (HEADER + self.d_model) as u64;
        let bindings = [&self.w, &self.state, &self.work, &self.out];
        let entries: Vec<wgpu::BindGroupEntry> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("deltanet"),
            layout: &self.project.get_bind_group_layout(0),
            entries: &entries,
        });
        let groups = |n: usize| n.div_ceil(WORKGROUP) as u32;
        let steps = [
            (&self.project, groups(self.rows)),
            (&self.heads_pipeline, self.heads as u32),
            (&self.output, groups(self.d_model)),
        ];
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if let Some(&(_, n)) = steps.iter().find(|(_, n)| *n > max) {
            let what = alloc::format!("a DeltaNet dispatch of {n} workgroups");
            return Err(GpuError::TooLarge { what, need: n as u64, limit: max as u64 });
        }
        let mut ys = Vec::with_capacity(xs.len());
        for chunk in xs.chunks(CHUNK) {
            let errors = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("deltanet outputs"),
                size: out_bytes * chunk.len() as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            for (t, x) in chunk.iter().enumerate() {
                let bits: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
                gpu.queue.write_buffer(&self.work, 0, &words_to_bytes(&bits));
                gpu.queue.write_buffer(&self.out, 0, &[0; 4 * HEADER]);
                let mut encoder = gpu.device.create_command_encoder(&Default::default());
                {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    pass.set_bind_group(0, &group, &[]);
                    for (pipeline, n) in steps {
                        pass.set_pipeline(pipeline);
                        pass.dispatch_workgroups(n, 1, 1);
                    }
                }
                encoder.copy_buffer_to_buffer(&self.out, 0, &staging, out_bytes * t as u64, out_bytes);
                gpu.queue.submit([encoder.finish()]);
            }
            if let Some(e) = errors.pop().await {
                return Err(GpuError::Gpu(e.to_string()));
            }
            let words = bytes_to_words(&gpu.map_read(&staging).await?);
            for out in words.chunks_exact(HEADER + self.d_model) {
                let step = match out[0] {
                    0 => {
                        ys.push(out[HEADER..].iter().map(|&b| f32::from_bits(b)).collect());
                        continue;
                    }
                    1 => "SiLU",
                    2 => "β = sigmoid(b)",
                    3 => "softplus(a + dt_bias)",
                    4 => "exp(a_log)",
                    5 => "α = exp(g)",
                    _ => "norm",
                };
                return Err(GpuError::NotExact { step: step.into(), head: out[1], arg: f32::from_bits(out[2]) });
            }
        }
        Ok(ys)
    }

    /// The recurrent state, head by head (`DeltaNet::state`'s layout).
    pub async fn state(&self, gpu: &Gpu) -> Result<Vec<f32>, GpuError> {
        let bytes = gpu.read(&self.state, 4 * self.state_len as u64).await?;
        Ok(bytes_to_words(&bytes).into_iter().map(f32::from_bits).collect())
    }
}
