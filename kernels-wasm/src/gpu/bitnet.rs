//! I2_S, TL1 and TL2 GEMV/GEMM on the GPU (`i2s.wgsl`, `tl1.wgsl`, `tl2.wgsl`).
//!
//! The weights are uploaded once, packed exactly as the CPU kernels hold them (bitnet.cpp's
//! layouts). Per call the CPU quantises each activation row (I2_S) or builds its tables
//! (`lut_ctor`, TL1 and TL2) — the same code the CPU kernels use — and uploads them; the GPU
//! computes the int32 accumulators, and the CPU applies the shared epilogue. So a GPU result
//! is the CPU's bit for bit, on any adapter.

use super::{Dispatched, Gpu, GpuError};
use crate::bitnet::i2s::I2sMatrix;
use crate::bitnet::lut::{PairTables, Tl2Tables};
use crate::bitnet::quant::{quantize_activations, QuantActs, Rounding};
use crate::bitnet::tl1::Tl1Matrix;
use crate::bitnet::tl2::Tl2Matrix;
use crate::bitnet::{dequantize_into, BitnetError};
use alloc::vec::Vec;

/// Invocations per workgroup, as the shaders declare it.
const WG: u32 = 64;

pub(super) struct Pipelines {
    i2s: wgpu::ComputePipeline,
    tl1: wgpu::ComputePipeline,
    tl2: wgpu::ComputePipeline,
}

impl Pipelines {
    pub(super) fn new(device: &wgpu::Device) -> Pipelines {
        let make = |name: &str, source: &'static str| {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        Pipelines {
            i2s: make("i2s", include_str!("i2s.wgsl")),
            tl1: make("tl1", include_str!("tl1.wgsl")),
            tl2: make("tl2", include_str!("tl2.wgsl")),
        }
    }
}

/// The shape parameters each shader takes (its `Params`, without `n`).
#[derive(Debug, Clone, Copy)]
enum Kind {
    I2s { lane_words: u32 },
    Tl1 { bm_tile: u32, bk: u32, bm: u32, k_blocks: u32 },
    Tl2 { bm_tile: u32, bk: u32, three_k: u32 },
}

/// A ternary matrix on the GPU, ready for GEMV and GEMM.
pub struct GpuMatrix {
    pub format: &'static str,
    pub rows: usize,
    pub cols: usize,
    kind: Kind,
    weights: wgpu::Buffer,
    scale: f32,
}

/// Activation rows as the shader reads them: their bytes (int8 rows or tables), one after
/// another, and each row's scale.
struct Prepared {
    bytes: Vec<u8>,
    per_row: usize,
    scales: Vec<f32>,
}

impl GpuMatrix {
    pub fn i2s(gpu: &Gpu, m: &I2sMatrix) -> Result<GpuMatrix, GpuError> {
        let kind = Kind::I2s { lane_words: (m.layout.lanes() / 4) as u32 };
        Self::upload(gpu, "I2_S", m.rows, m.cols, kind, &m.codes, m.scale)
    }

    pub fn tl1(gpu: &Gpu, m: &Tl1Matrix) -> Result<GpuMatrix, GpuError> {
        let (g, t) = (&m.geometry, m.geometry.tile);
        let kind =
            Kind::Tl1 { bm_tile: t.bm_tile as u32, bk: t.bk as u32, bm: t.bm as u32, k_blocks: g.k_blocks() as u32 };
        Self::upload(gpu, "TL1", g.m, g.k, kind, &m.packed, m.scale)
    }

    pub fn tl2(gpu: &Gpu, m: &Tl2Matrix) -> Result<GpuMatrix, GpuError> {
        let g = &m.geometry;
        let kind = Kind::Tl2 { bm_tile: g.tile.bm_tile as u32, bk: g.tile.bk as u32, three_k: g.three_k as u32 };
        Self::upload(gpu, "TL2", g.m, g.k, kind, &m.packed, m.scale)
    }

    fn upload(
        gpu: &Gpu,
        format: &'static str,
        rows: usize,
        cols: usize,
        kind: Kind,
        packed: &[u8],
        scale: f32,
    ) -> Result<GpuMatrix, GpuError> {
        let weights = gpu.storage(&alloc::format!("{format} weights"), packed)?;
        Ok(GpuMatrix { format, rows, cols, kind, weights, scale })
    }

    /// `Y = X·Wᵀ` for `n` activation rows `xs` (`n × K`) into `out` (`n × M`): bit-identical
    /// to `bitnet::threads::i2s_gemm` / `lut_gemm` on any CPU backend.
    /// Returns the dispatches' time on the GPU where the adapter has timestamp queries.
    pub async fn gemm(&self, gpu: &Gpu, xs: &[f32], out: &mut [f32]) -> Result<Option<f64>, GpuError> {
        let n = out.len() / self.rows.max(1);
        check("outputs (a whole number of rows)", n * self.rows, out.len())?;
        check("activations (n rows of K)", n * self.cols, xs.len())?;
        // Round half to even, as `i2s_gemm` and `lut_ctor` quantise.
        let acts = xs
            .chunks_exact(self.cols)
            .map(|x| quantize_activations(x, Rounding::HalfEven))
            .collect::<Result<Vec<_>, _>>()?;
        let prepared = self.prepare(&acts)?;
        let (acc, gpu_ns) = self.run(gpu, &prepared).await?;
        for ((o, a), &s) in out.chunks_exact_mut(self.rows).zip(acc.chunks_exact(self.rows)).zip(&prepared.scales) {
            dequantize_into(o, a, s, self.scale);
        }
        Ok(gpu_ns)
    }

    /// The exact int32 accumulators `Σ w·q` (`n × M`) of activation rows already quantised:
    /// the part the GPU does.
    pub async fn gemm_acc(&self, gpu: &Gpu, acts: &[QuantActs]) -> Result<Vec<i32>, GpuError> {
        Ok(self.run(gpu, &self.prepare(acts)?).await?.0)
    }

    /// Per activation row: I2_S's int8 row, or the TL formats' tables (`lut_ctor`).
    fn prepare(&self, acts: &[QuantActs]) -> Result<Prepared, GpuError> {
        let mut p = Prepared { bytes: Vec::new(), per_row: 0, scales: Vec::new() };
        for a in acts {
            check("activations", self.cols, a.q.len())?;
            let bytes = match self.kind {
                Kind::I2s { .. } => a.q.iter().map(|&v| v as u8).collect(),
                Kind::Tl1 { .. } => PairTables::from_quantized(a)?.bytes,
                Kind::Tl2 { three_k, .. } => {
                    let t = Tl2Tables::from_quantized(a, three_k as usize)?;
                    [t.three, t.two].concat()
                }
            };
            p.per_row = bytes.len();
            p.bytes.extend(bytes);
            p.scales.push(a.scale);
        }
        Ok(p)
    }

    /// Dispatches in chunks of activation rows small enough for the adapter's buffer and
    /// dispatch limits.
    async fn run(&self, gpu: &Gpu, p: &Prepared) -> Result<(Vec<i32>, Option<f64>), GpuError> {
        let n = p.scales.len();
        let limit = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        let per_row = (p.per_row.next_multiple_of(4) as u64).max((self.rows * 4) as u64);
        let chunk = (limit / per_row.max(1)).min(gpu.limits.max_compute_workgroups_per_dimension as u64) as usize;
        if chunk == 0 {
            let what = alloc::format!("one activation row of {} for a {}x{} matrix", self.format, self.rows, self.cols);
            return Err(GpuError::TooLarge { what, need: per_row, limit });
        }
        let (mut acc, mut gpu_ns) = (Vec::with_capacity(n * self.rows), Some(0.0));
        for first in (0..n).step_by(chunk) {
            let rows = chunk.min(n - first);
            let acts = gpu.storage("activations", &p.bytes[first * p.per_row..(first + rows) * p.per_row])?;
            let d = self.dispatch(gpu, &acts, rows).await?;
            acc.extend(d.bytes.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            gpu_ns = gpu_ns.zip(d.gpu_ns).map(|(a, b)| a + b);
        }
        Ok((acc, gpu_ns))
    }

    async fn dispatch(&self, gpu: &Gpu, acts: &wgpu::Buffer, n: usize) -> Result<Dispatched, GpuError> {
        let (m, k, n32) = (self.rows as u32, self.cols as u32, n as u32);
        let (pipeline, params, groups) = match self.kind {
            Kind::I2s { lane_words } => (&gpu.pipelines.i2s, [m, k, lane_words, n32].to_vec(), [m, n32, 1]),
            Kind::Tl1 { bm_tile, bk, bm, k_blocks } => {
                (&gpu.pipelines.tl1, [m, k, bm_tile, bk, bm, k_blocks, n32, 0].to_vec(), [m.div_ceil(WG), n32, 1])
            }
            Kind::Tl2 { bm_tile, bk, three_k } => {
                (&gpu.pipelines.tl2, [m, k, bm_tile, bk, three_k, n32, 0, 0].to_vec(), [m.div_ceil(WG), n32, 1])
            }
        };
        let out_bytes = (n * self.rows * 4) as u64;
        let out = gpu.output(out_bytes)?;
        let params = gpu.uniform(&params);
        gpu.dispatch(pipeline, &[&params, &self.weights, acts, &out], groups, out_bytes).await
    }
}

fn check(what: &'static str, expected: usize, got: usize) -> Result<(), GpuError> {
    match expected == got {
        true => Ok(()),
        false => Err(BitnetError::Length { what, expected, got }.into()),
    }
}
