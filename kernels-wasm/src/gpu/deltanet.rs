//! A Gated DeltaNet layer of the second machine on the GPU (`deltanet.wgsl`), with its
//! recurrent state in a GPU buffer: a step runs three dispatches, with the CPU's bits
//! ([`crate::qwengpu::deltanet::DeltaNet::step`]) or an error naming the step that could not
//! promise them. In a whole machine (`gpu::machine`) the layer's norm comes first and its
//! output is added to the stream; alone ([`GpuDeltaNet`], for the tests) it maps a normed input to
//! its output (issue #22, `docs/qwengpu-second-machine.md` §33).
//!
//! `w` (read-only words): the row table of the stacked projections `[W_qkv; W_z; W_b; W_a]`
//! (`rows + 1` absolute offsets), the row table of `W_out` (`d_model + 1`), the rows' `(column,
//! weight bits)` pairs in column order, then `a_log`, `dt_bias` (a word a head), the norm's
//! `d_v` weights, ε, `1/√d_k` and the keys' `1e-6` (the CPU's own f32 values), then the
//! machine's norm weights on the stream and its ε.

use super::machine::{outcome, scratch_at, Own, Params, Shaders, Step};
use super::{bytes_to_words, groups_of_64, Gpu, GpuError, OUTCOME};
use crate::qwengpu::deltanet::{DeltaNetWeights, Matrix};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

/// A DeltaNet layer alone on the GPU, with its state.
pub struct GpuDeltaNet {
    shaders: Arc<Shaders>,
    own: Own,
    work: wgpu::Buffer,
    out: wgpu::Buffer,
    group: wgpu::BindGroup,
    d_model: usize,
    steps: [(Step, u32); 3],
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

/// Uploads a layer (its state zero, as [`DeltaNet::new`](crate::qwengpu::deltanet::DeltaNet::new)
/// leaves it), pre-normed with `norm` and `eps` in a machine, as its `layer`-th. Only identity
/// convolution taps are supported: every machine layer has them.
pub(super) fn upload(gpu: &Gpu, w: &DeltaNetWeights, (norm, eps): (&[f32], f32), layer: u32) -> Result<Own, GpuError> {
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
    let norm_at = vec_table + 2 * heads + dv + constants.len();
    let vectors = w.a_log.iter().chain(&w.dt_bias).chain(&w.norm).chain(&constants).chain(norm).chain([&eps]);
    let words: Vec<u32> =
        stacked.into_iter().chain(out_rows).chain(entries).chain(vectors.map(|v| v.to_bits())).collect();
    let mid_at = scratch_at(d);
    let hot_at = mid_at + rows;
    let o_at = hot_at + heads * 4 * dk;
    let g_at = o_at + heads * dv;
    let u = |v: usize| v as u32;
    let params = Params {
        rows: u(rows),
        channels: u(channels),
        heads: u(heads),
        dk: u(dk),
        dv: u(dv),
        row_table: 0,
        out_table: u(rows + 1),
        vec_table: u(vec_table),
        mid_at: u(mid_at),
        hot_at: u(hot_at),
        o_at: u(o_at),
        g_at: u(g_at),
        norm_at: u(norm_at),
        eps_at: u(norm_at + norm.len()),
        layer,
        ..Params::default()
    };
    let mut own = Own::new(gpu, "a DeltaNet layer", &params, &words, heads * dk * dv)?;
    own.scratch = g_at + heads * dv - mid_at;
    Ok(own)
}

/// The dispatches of a step after the norm: the projections, the heads, the output.
pub(super) fn steps(w: &DeltaNetWeights) -> [(Step, u32); 3] {
    let rows = w.channels() + w.heads * w.d_v + 2 * w.heads;
    [(Step::Project, groups_of_64(rows)), (Step::Heads, w.heads as u32), (Step::Output, groups_of_64(w.d_model))]
}

impl GpuDeltaNet {
    /// Uploads a layer alone, its state zero.
    pub fn new(gpu: &Gpu, w: &DeltaNetWeights) -> Result<GpuDeltaNet, GpuError> {
        let d = w.d_model;
        let own = upload(gpu, w, (&vec![0.0; d], 0.0), 0)?;
        let shaders = Shaders::of(gpu, d);
        let work = gpu.read_write("deltanet work", scratch_at(d) + own.scratch)?;
        let out = gpu.read_write("deltanet outcome", OUTCOME)?;
        let group = own.group(gpu, &shaders, &work, &out);
        let steps = steps(w);
        Ok(GpuDeltaNet { shaders, own, work, out, group, d_model: d, steps, state_len: w.heads * w.d_k * w.d_v })
    }

    /// One token: updates the state and returns the layer's output, as `DeltaNet::step`.
    pub async fn step(&self, gpu: &Gpu, x: &[f32]) -> Result<Vec<f32>, GpuError> {
        Ok(self.steps(gpu, &[x]).await?.pop().unwrap_or_default())
    }

    /// Consecutive tokens, each one's output (see [`Gpu::passes`]). On an error nothing from
    /// the token that raised it on is returned; the state has run on to the end of its chunk.
    pub async fn steps(&self, gpu: &Gpu, xs: &[&[f32]]) -> Result<Vec<Vec<f32>>, GpuError> {
        let d = self.d_model;
        if let Some(x) = xs.iter().find(|x| x.len() != d) {
            let why = alloc::format!("an input of {} channels for a layer of {d}", x.len());
            return Err(GpuError::Unsupported(why));
        }
        let steps = self.shaders.passes(self.steps);
        let tokens: Vec<Vec<u32>> = xs.iter().map(|x| x.iter().map(|v| v.to_bits()).collect()).collect();
        // The input is the normed stream n; the output is y.
        let (input, output) = ((&self.work, d), (&self.work, 2 * d, d));
        let outs = gpu.passes(&steps, &self.group, input, &tokens, &self.out, output).await?;
        let mut ys = Vec::with_capacity(outs.len());
        for out in outs {
            outcome(&out, d, false)?;
            ys.push(out[OUTCOME..].iter().map(|&b| f32::from_bits(b)).collect());
        }
        Ok(ys)
    }

    /// The recurrent state, head by head (`DeltaNet::state`'s layout).
    pub async fn state(&self, gpu: &Gpu) -> Result<Vec<f32>, GpuError> {
        let bytes = gpu.read(&self.own.state, 4 * self.state_len as u64).await?;
        Ok(bytes_to_words(&bytes).into_iter().map(f32::from_bits).collect())
    }
}
