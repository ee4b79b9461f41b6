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

use super::{groups_of_64, words_to_bytes, Gpu, GpuError, OUTCOME};
use crate::qwengpu::limbs::Layer;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A SwiGLU layer on the GPU (it has no state).
pub struct GpuSwiGlu {
    norm: wgpu::ComputePipeline,
    units_pipeline: wgpu::ComputePipeline,
    down: wgpu::ComputePipeline,
    w: wgpu::Buffer,
    work: wgpu::Buffer,
    out: wgpu::Buffer,
    d: usize,
    units: usize,
}

impl GpuSwiGlu {
    /// Uploads `layer` for a stream of `norm.len()` channels, normed with the weights `norm` and
    /// `eps`.
    pub fn new(gpu: &Gpu, layer: &Layer, norm: &[f32], eps: f32) -> Result<GpuSwiGlu, GpuError> {
        let (d, units) = (norm.len(), layer.units.len());
        let outside =
            layer.units.iter().flat_map(|u| u.gate.iter().chain(&u.up).chain(&u.down)).find(|&&(c, _)| c >= d);
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
        if words.len() > u32::MAX as usize {
            let what = String::from("a SwiGLU layer's weights (words)");
            return Err(GpuError::TooLarge { what, need: words.len() as u64, limit: u32::MAX as u64 });
        }
        let (n_at, h_at) = (d, 2 * d);
        let header = alloc::format!(
            "const D: u32 = {d}u;\nconst UNITS: u32 = {units}u;\nconst UNIT_TABLE: u32 = 0u;\n\
             const CHAN_TABLE: u32 = {}u;\nconst NORM_AT: u32 = {norm_at}u;\nconst EPS_AT: u32 = {}u;\n\
             const X_AT: u32 = 0u;\nconst N_AT: u32 = {n_at}u;\nconst H_AT: u32 = {h_at}u;\n",
            2 * units + 1,
            norm_at + d
        );
        let source: String =
            [header.as_str(), include_str!("exact.wgsl"), include_str!("outcome.wgsl"), include_str!("swiglu.wgsl")]
                .concat();
        let [norm_pipeline, units_pipeline, down] = gpu.pipelines("swiglu", source, 3, ["norm", "units", "down"]);
        Ok(GpuSwiGlu {
            norm: norm_pipeline,
            units_pipeline,
            down,
            w: gpu.storage("swiglu weights", &words_to_bytes(&words))?,
            work: gpu.read_write("swiglu work", h_at + units)?,
            out: gpu.read_write("swiglu output", OUTCOME + d)?,
            d,
            units,
        })
    }

    /// Consecutive tokens' streams through the layer, each one's stream after it (see
    /// [`Gpu::passes`]); stops at the first token whose gate or norm could not be exact.
    pub async fn forward(&self, gpu: &Gpu, xs: &[&[f32]]) -> Result<Vec<Vec<f32>>, GpuError> {
        if let Some(x) = xs.iter().find(|x| x.len() != self.d) {
            let why = alloc::format!("a stream of {} channels for a layer of {}", x.len(), self.d);
            return Err(GpuError::Unsupported(why));
        }
        let steps =
            [(&self.norm, 1), (&self.units_pipeline, groups_of_64(self.units)), (&self.down, groups_of_64(self.d))];
        let tokens: Vec<Vec<u32>> = xs.iter().map(|x| x.iter().map(|v| v.to_bits()).collect()).collect();
        let bindings = [&self.w, &self.work, &self.out];
        let outs = gpu.passes(&steps, &bindings, &self.work, &tokens, OUTCOME + self.d).await?;
        let mut ys = Vec::with_capacity(outs.len());
        for out in outs {
            let (step, at) = match out[0] {
                0 => {
                    ys.push(out[OUTCOME..].iter().map(|&b| f32::from_bits(b)).collect());
                    continue;
                }
                1 => ("a SwiGLU gate's SiLU", alloc::format!("unit {}", out[1])),
                _ if out[1] as usize == self.d => ("norm's sum of squares", String::from("the stream")),
                _ => ("norm", alloc::format!("channel {}", out[1])),
            };
            return Err(GpuError::NotExact { step: step.into(), at, arg: f32::from_bits(out[2]) });
        }
        Ok(ys)
    }
}
