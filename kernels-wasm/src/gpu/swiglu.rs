//! A SwiGLU layer of the second machine on the GPU (`swiglu.wgsl`), as the spliced runner
//! applies it: the stream normed with the machine's norm weights, the units, their outputs added
//! to the channels they write. A token's stream goes in and the stream after the layer comes back,
//! with the CPU's bits (`limbs::Layer::forward_with`, `awake::Layer::forward_scheduled`) or an
//! error naming the unit or channel that could not promise them (issue #22,
//! `docs/qwengpu-second-machine.md` §33).
//!
//! `w` (read-only words): the units' table (`2·units + 1` absolute offsets: unit u's gate pairs
//! start at entry `2u`, its up pairs at `2u + 1`, and end where unit u + 1's gate pairs start),
//! the channels' table (`d + 1` offsets: channel c's `(unit, down weight)` pairs in unit order),
//! the pairs, then the `d` norm weights and ε.

use super::machine::{outcome, scratch_at, Own, Params, Shaders, Step};
use super::{groups_of_64, Gpu, GpuError, OUTCOME};
use crate::qwengpu::limbs::Layer;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

/// A SwiGLU layer alone on the GPU (it has no state).
pub struct GpuSwiGlu {
    shaders: Arc<Shaders>,
    work: wgpu::Buffer,
    out: wgpu::Buffer,
    group: wgpu::BindGroup,
    d: usize,
    units: usize,
}

/// Uploads `layer` for a stream of `norm.len()` channels, normed with the weights `norm` and
/// `eps`, as a machine's `index`-th layer.
pub(super) fn upload(gpu: &Gpu, layer: &Layer, (norm, eps): (&[f32], f32), index: u32) -> Result<Own, GpuError> {
    let (d, units) = (norm.len(), layer.units.len());
    let outside = layer.units.iter().flat_map(|u| u.gate.iter().chain(&u.up).chain(&u.down)).find(|&&(c, _)| c >= d);
    if let Some(&(c, _)) = outside {
        return Err(GpuError::Unsupported(alloc::format!(
            "a unit reading or writing channel {c} of a {d}-channel stream"
        )));
    }
    let tables = (2 * units + 1) + (d + 1);
    let mut entries = Vec::new();
    let mut unit_table = Vec::with_capacity(2 * units + 1);
    for u in &layer.units {
        for part in [&u.gate, &u.up] {
            unit_table.push((tables + entries.len()) as u32);
            entries.extend(part.iter().flat_map(|&(c, v)| [c as u32, v.to_bits()]));
        }
    }
    unit_table.push((tables + entries.len()) as u32);
    let mut by_channel: Vec<Vec<(u32, f32)>> = vec![Vec::new(); d];
    for (i, u) in layer.units.iter().enumerate() {
        for &(c, v) in &u.down {
            by_channel[c].push((i as u32, v));
        }
    }
    let mut chan_table = Vec::with_capacity(d + 1);
    for list in &by_channel {
        chan_table.push((tables + entries.len()) as u32);
        entries.extend(list.iter().flat_map(|&(u, v)| [u, v.to_bits()]));
    }
    chan_table.push((tables + entries.len()) as u32);
    let norm_at = tables + entries.len();
    let words: Vec<u32> = unit_table
        .into_iter()
        .chain(chan_table)
        .chain(entries)
        .chain(norm.iter().chain([&eps]).map(|v| v.to_bits()))
        .collect();
    let params = Params {
        units: units as u32,
        unit_table: 0,
        chan_table: (2 * units + 1) as u32,
        h_at: scratch_at(d) as u32,
        norm_at: norm_at as u32,
        eps_at: (norm_at + d) as u32,
        layer: index,
        ..Params::default()
    };
    let mut own = Own::new(gpu, "a SwiGLU layer", &params, &words, 0)?;
    own.scratch = units;
    Ok(own)
}

/// A token's dispatches: the norm, the units, the channels.
pub(super) fn steps(units: usize, d: usize) -> [(Step, u32); 3] {
    [(Step::Norm, 1), (Step::Units, groups_of_64(units)), (Step::Down, groups_of_64(d))]
}

impl GpuSwiGlu {
    /// Uploads `layer` alone for a stream of `norm.len()` channels, normed with the weights
    /// `norm` and `eps`.
    pub fn new(gpu: &Gpu, layer: &Layer, norm: &[f32], eps: f32) -> Result<GpuSwiGlu, GpuError> {
        let d = norm.len();
        let own = upload(gpu, layer, (norm, eps), 0)?;
        let shaders = Shaders::of(gpu, d);
        let work = gpu.read_write("swiglu work", scratch_at(d) + own.scratch)?;
        let out = gpu.read_write("swiglu outcome", OUTCOME)?;
        let group = own.group(gpu, &shaders, &work, &out);
        Ok(GpuSwiGlu { shaders, work, out, group, d, units: layer.units.len() })
    }

    /// Consecutive tokens' streams through the layer, each one's stream after it (see
    /// [`Gpu::passes`]); stops at the first token whose gate or norm could not be exact.
    pub async fn forward(&self, gpu: &Gpu, xs: &[&[f32]]) -> Result<Vec<Vec<f32>>, GpuError> {
        let d = self.d;
        if let Some(x) = xs.iter().find(|x| x.len() != d) {
            let why = alloc::format!("a stream of {} channels for a layer of {d}", x.len());
            return Err(GpuError::Unsupported(why));
        }
        let steps = self.shaders.passes(steps(self.units, d));
        let tokens: Vec<Vec<u32>> = xs.iter().map(|x| x.iter().map(|v| v.to_bits()).collect()).collect();
        // The stream is updated in place.
        let outs = gpu.passes(&steps, &self.group, (&self.work, 0), &tokens, &self.out, (&self.work, 0, d)).await?;
        let mut ys = Vec::with_capacity(outs.len());
        for out in outs {
            outcome(&out, d, false)?;
            ys.push(out[OUTCOME..].iter().map(|&b| f32::from_bits(b)).collect());
        }
        Ok(ys)
    }
}
