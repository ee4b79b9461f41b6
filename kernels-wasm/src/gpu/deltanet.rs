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

use super::{bytes_to_words, groups_of_64, words_to_bytes, Gpu, GpuError, OUTCOME};
use crate::qwengpu::deltanet::{DeltaNetWeights, Matrix};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

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

impl GpuDeltaNet {
    /// Uploads a layer (its state zero, as [`DeltaNet::new`](crate::qwengpu::deltanet::DeltaNet::new)
    /// leaves it). Only identity convolution taps are supported: every machine layer has them.
    pub fn new(gpu: &Gpu, w: &DeltaNetWeights) -> Result<GpuDeltaNet, GpuError> {
        if !w.sizes_agree() {
            return Err(GpuError::Unsupported("a DeltaNet whose tensors disagree with its shape".into()));
        }
        if !w.identity_taps() {
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
        let source: String =
            [header.as_str(), include_str!("exact.wgsl"), include_str!("outcome.wgsl"), include_str!("deltanet.wgsl")]
                .concat();
        let [project, heads_pipeline, output] = gpu.pipelines("deltanet", source, 4, ["project", "heads", "output"]);
        let state_len = heads * dk * dv;
        Ok(GpuDeltaNet {
            project,
            heads_pipeline,
            output,
            w: gpu.storage("deltanet weights", &words_to_bytes(&words))?,
            state: gpu.read_write("deltanet state", state_len)?,
            work: gpu.read_write("deltanet work", work_words)?,
            out: gpu.read_write("deltanet output", OUTCOME + d)?,
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

    /// Consecutive tokens, each one's output (see [`Gpu::passes`]). On an error nothing from
    /// the token that raised it on is returned; the state has run on to the end of its chunk.
    pub async fn steps(&self, gpu: &Gpu, xs: &[&[f32]]) -> Result<Vec<Vec<f32>>, GpuError> {
        if let Some(x) = xs.iter().find(|x| x.len() != self.d_model) {
            let why = alloc::format!("an input of {} channels for a layer of {}", x.len(), self.d_model);
            return Err(GpuError::Unsupported(why));
        }
        let steps = [
            (&self.project, groups_of_64(self.rows)),
            (&self.heads_pipeline, self.heads as u32),
            (&self.output, groups_of_64(self.d_model)),
        ];
        let tokens: Vec<Vec<u32>> = xs.iter().map(|x| x.iter().map(|v| v.to_bits()).collect()).collect();
        let bindings = [&self.w, &self.state, &self.work, &self.out];
        let outs = gpu.passes(&steps, &bindings, &self.work, &tokens, OUTCOME + self.d_model).await?;
        let mut ys = Vec::with_capacity(outs.len());
        for out in outs {
            let step = match out[0] {
                0 => {
                    ys.push(out[OUTCOME..].iter().map(|&b| f32::from_bits(b)).collect());
                    continue;
                }
                1 => "the DeltaNet's SiLU",
                2 => "the DeltaNet's β = sigmoid(b)",
                3 => "the DeltaNet's softplus(a + dt_bias)",
                4 => "the DeltaNet's exp(a_log)",
                5 => "the DeltaNet's α = exp(g)",
                _ => "the DeltaNet's norm",
            };
            let at = alloc::format!("head {}", out[1]);
            return Err(GpuError::NotExact { step: step.into(), at, arg: f32::from_bits(out[2]) });
        }
        Ok(ys)
    }

    /// The recurrent state, head by head (`DeltaNet::state`'s layout).
    pub async fn state(&self, gpu: &Gpu) -> Result<Vec<f32>, GpuError> {
        let bytes = gpu.read(&self.state, 4 * self.state_len as u64).await?;
        Ok(bytes_to_words(&bytes).into_iter().map(f32::from_bits).collect())
    }
}
