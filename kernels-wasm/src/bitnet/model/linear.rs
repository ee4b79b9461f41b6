//! A model's matrices: the ternary linear layers in any of bitnet.cpp's formats, and the F16 /
//! F32 embedding table that also serves as the output layer.
//!
//! A linear layer takes `n` activation rows (`n × K`) and gives `n × M`. As ggml's mul_mat does,
//! each row is prepared first (I2_S: per-row int8 quantisation; TL1/TL2: the lookup tables), the
//! rows shared out to the threads; then the threads share the weight rows in blocks, every block
//! read once for all `n` rows (which is what makes prompt processing a GEMM rather than `n`
//! GEMVs), each block's outputs written straight into place.

#[cfg(all(target_arch = "x86_64", feature = "std"))]
use super::block_gemm;
use super::par::{map, Disjoint, Parallel};
use crate::bitnet::backend::Backend;
use crate::bitnet::blob::Blob;
#[cfg(all(target_arch = "x86_64", feature = "std"))]
use crate::bitnet::i2s::unpacked;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::lut_matrix::LutMatrix;
use crate::bitnet::quant::{quantize_activations, QuantActs, Rounding, TernaryMatrix};
use crate::bitnet::tl1::Tl1Matrix;
use crate::bitnet::tl2::Tl2Matrix;
use crate::bitnet::{dequantize_into, BitnetError};
use crate::gguf::GgmlType;
use alloc::vec;
use alloc::vec::Vec;

/// The ternary formats, by the names bitnet.cpp gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quant {
    I2s,
    Tl1,
    Tl2,
}

impl Quant {
    pub const ALL: [Quant; 3] = [Quant::I2s, Quant::Tl1, Quant::Tl2];

    pub fn name(self) -> &'static str {
        match self {
            Quant::I2s => "i2_s",
            Quant::Tl1 => "tl1",
            Quant::Tl2 => "tl2",
        }
    }

    pub fn parse(s: &str) -> Option<Quant> {
        Quant::ALL.into_iter().find(|q| q.name().eq_ignore_ascii_case(s))
    }

    pub fn ggml(self) -> GgmlType {
        match self {
            Quant::I2s => GgmlType::I2_S,
            Quant::Tl1 => GgmlType::TL1,
            Quant::Tl2 => GgmlType::TL2,
        }
    }

    /// `general.file_type` as the fork's llama-quantize sets it (`LLAMA_FTYPE_MOSTLY_*`).
    pub fn file_type(self) -> u32 {
        match self {
            Quant::I2s => 40,
            Quant::Tl1 => 38,
            Quant::Tl2 => 39,
        }
    }
}

/// The accumulators of activation rows `j, j + 1, …` (one per `scales` entry, `acc` holding a
/// block of rows for each) on matrix i's weight block at row0, and each row's activation scale.
type AccOf<'a> = dyn Fn(usize, usize, usize, &mut [i32], &mut [f32]) -> Result<(), BitnetError> + Sync + 'a;

/// Activation rows per call of an [`AccOf`]: I2_S's AVX-512 tile reads each weight quad once
/// for four (AVX2 and the LUT kernels take them in pairs).
const ROWS_PER_CALL: usize = 4;

/// Weight rows per work unit of I2_S (a block of rows is read once for all activation rows).
const I2S_ROWS: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub enum Linear {
    I2s(I2sMatrix),
    Tl1(Tl1Matrix),
    Tl2(Tl2Matrix),
}

impl Linear {
    /// Packs ternary weights (`rows × cols`, PyTorch's `(out, in)`) in `quant`'s layout (x86
    /// I2_S; TL1/TL2 with the tiles bitnet.cpp's presets or rules pick for the shape).
    pub fn pack(t: &TernaryMatrix, quant: Quant) -> Result<Linear, BitnetError> {
        Ok(match quant {
            Quant::I2s => Linear::I2s(I2sMatrix::pack(t, I2sLayout::X86)?),
            Quant::Tl1 => Linear::Tl1(Tl1Matrix::pack(t)?),
            Quant::Tl2 => Linear::Tl2(Tl2Matrix::pack(t)?),
        })
    }

    pub fn quant(&self) -> Quant {
        match self {
            Linear::I2s(_) => Quant::I2s,
            Linear::Tl1(_) => Quant::Tl1,
            Linear::Tl2(_) => Quant::Tl2,
        }
    }

    /// (M, K): outputs, inputs.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Linear::I2s(m) => (m.rows, m.cols),
            Linear::Tl1(m) => m.shape(),
            Linear::Tl2(m) => m.shape(),
        }
    }

    pub fn scale(&self) -> f32 {
        match self {
            Linear::I2s(m) => m.scale,
            Linear::Tl1(m) => m.scale,
            Linear::Tl2(m) => m.scale,
        }
    }

    pub fn packed(&self) -> &Blob {
        match self {
            Linear::I2s(m) => &m.codes,
            Linear::Tl1(m) => &m.packed,
            Linear::Tl2(m) => &m.packed,
        }
    }

    pub fn unpack(&self) -> TernaryMatrix {
        match self {
            Linear::I2s(m) => m.unpack(),
            Linear::Tl1(m) => m.unpack(),
            Linear::Tl2(m) => m.unpack(),
        }
    }

    /// Rows per work unit.
    fn block(&self) -> usize {
        match self {
            Linear::I2s(m) if m.rows.is_multiple_of(I2S_ROWS) => I2S_ROWS,
            Linear::I2s(_) => 1,
            Linear::Tl1(m) => m.bm_tile(),
            Linear::Tl2(m) => m.bm_tile(),
        }
    }

    /// `out (n × M) = xs (n × K) · Wᵀ`.
    pub fn forward(
        &self,
        xs: &[f32],
        backend: Backend,
        par: &dyn Parallel,
        out: &mut [f32],
    ) -> Result<(), BitnetError> {
        Self::forward_many(&[self], xs, backend, par, &mut [out])
    }

    /// What the activation rows are prepared into depends on (format, K, TL2's `three_k`).
    fn preparation(&self) -> (Quant, usize, usize) {
        let three_k = if let Linear::Tl2(m) = self { m.geometry.three_k } else { 0 };
        (self.quant(), self.shape().1, three_k)
    }

    /// `outs[i] (n × M_i) = xs (n × K) · W_iᵀ` for matrices that read the same input (q, k, v;
    /// gate, up): the rows are quantised (or their tables built) once, and one hand-out to the
    /// threads covers every matrix's blocks. Matrices that differ in format, K or block size
    /// are run one after another.
    pub fn forward_many(
        ws: &[&Linear],
        xs: &[f32],
        backend: Backend,
        par: &dyn Parallel,
        outs: &mut [&mut [f32]],
    ) -> Result<(), BitnetError> {
        let Some(first) = ws.first() else { return Ok(()) };
        let (k, block) = (first.shape().1, first.block());
        let n = xs.len() / k;
        crate::bitnet::quant::check_len("activations (whole rows of K)", n * k, xs.len())?;
        crate::bitnet::quant::check_len("outputs (one per matrix)", ws.len(), outs.len())?;
        for (w, o) in ws.iter().zip(outs.iter()) {
            crate::bitnet::quant::check_len("outputs (n rows of M)", n * w.shape().0, o.len())?;
        }
        if ws.iter().any(|w| w.preparation() != first.preparation() || w.block() != block) {
            for (w, o) in ws.iter().zip(outs.iter_mut()) {
                Self::forward_many(&[w], xs, backend, par, &mut [o])?;
            }
            return Ok(());
        }
        // I2_S prompts on AVX-512 and AVX2 take the 32-row block GEMMs, which write their own
        // outputs.
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        if block == unpacked::ROWS {
            let i2s: Vec<&I2sMatrix> =
                ws.iter().filter_map(|w| if let Linear::I2s(m) = w { Some(m) } else { None }).collect();
            if i2s.len() == ws.len() && block_gemm::applies(&i2s, n, backend) {
                let acts = quantize_rows(xs, k, par)?;
                let acts = block_gemm::Acts::new(&acts, k, backend, par)?;
                return block_gemm::many(&i2s, &acts, par, outs);
            }
        }
        // Work unit g is row block g of all the matrices' blocks, matrix after matrix: block b
        // of matrix i for every activation row, so its weights are read once for all n.
        let mut starts = alloc::vec![0usize];
        for w in ws {
            starts.push(starts[starts.len() - 1] + w.shape().0 / block);
        }
        let total = starts[ws.len()];
        let dests: Vec<Disjoint<f32>> = outs.iter_mut().map(|o| Disjoint::new(o)).collect();
        // `acc_of` takes `per_call` activation rows at a time.
        let blocks = |per_call: usize, acc_of: &AccOf| {
            par.ranges(total, &|units| {
                let (mut acc, mut scales) = (vec![0i32; per_call * block], vec![0.0f32; per_call]);
                for g in units {
                    let i = starts.partition_point(|&s| s <= g) - 1;
                    let (m, row0) = (ws[i].shape().0, (g - starts[i]) * block);
                    for j0 in (0..n).step_by(per_call) {
                        let rows = (n - j0).min(per_call);
                        let (acc, scales) = (&mut acc[..rows * block], &mut scales[..rows]);
                        acc_of(i, j0, row0, acc, scales)?;
                        for (t, (a, &s)) in acc.chunks_exact(block).zip(&*scales).enumerate() {
                            let at = (j0 + t) * m + row0;
                            // SAFETY: only unit g writes outputs row0..row0 + block of matrix i
                            // (in every activation row), and the threads' units are disjoint.
                            let o = unsafe { dests[i].range_mut(at..at + block) };
                            dequantize_into(o, a, s, ws[i].scale());
                        }
                    }
                }
                Ok(())
            })
        };
        // Every matrix has the first one's format (checked above): collect that variant only.
        match first.quant() {
            Quant::I2s => {
                let i2s: Vec<&I2sMatrix> =
                    ws.iter().filter_map(|w| if let Linear::I2s(m) = w { Some(m) } else { None }).collect();
                let acts = quantize_rows(xs, k, par)?;
                blocks(ROWS_PER_CALL, &|i, j, row0, acc, scales| {
                    let rows = scales.len();
                    let mut q: [&[i8]; ROWS_PER_CALL] = [&[]; ROWS_PER_CALL];
                    let mut sums = [0i32; ROWS_PER_CALL];
                    for t in 0..rows {
                        (q[t], sums[t], scales[t]) = (&acts[j + t].0.q, acts[j + t].1, acts[j + t].0.scale);
                    }
                    i2s[i].gemm_acc_rows(&q[..rows], &sums[..rows], backend, row0, acc)?;
                    Ok(())
                })?
            }
            Quant::Tl1 => {
                let tl1: Vec<&Tl1Matrix> =
                    ws.iter().filter_map(|w| if let Linear::Tl1(m) = w { Some(m) } else { None }).collect();
                lut_blocks(&tl1, xs, backend, par, &|f| blocks(ROWS_PER_CALL, f))?
            }
            Quant::Tl2 => {
                let tl2: Vec<&Tl2Matrix> =
                    ws.iter().filter_map(|w| if let Linear::Tl2(m) = w { Some(m) } else { None }).collect();
                lut_blocks(&tl2, xs, backend, par, &|f| blocks(ROWS_PER_CALL, f))?
            }
        }
        Ok(())
    }

    /// `out = glu(xs · gateᵀ, xs · upᵀ)` element by element in one pass, where the I2_S
    /// block GEMM runs (AVX-512 or AVX2, enough rows; see [`block_gemm`]): `Ok(false)` elsewhere, and
    /// the caller runs [`Self::forward_many`] and `glu` itself, which gives the same bits.
    pub fn forward_gated(
        gate: &Linear,
        up: &Linear,
        xs: &[f32],
        backend: Backend,
        par: &dyn Parallel,
        out: &mut [f32],
        glu: &(dyn Fn(&mut [f32], &[f32]) + Sync),
    ) -> Result<bool, BitnetError> {
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        if let (Linear::I2s(g), Linear::I2s(u)) = (gate, up) {
            let (k, n) = (g.cols, xs.len() / g.cols.max(1));
            if u.cols == k && u.rows == g.rows && block_gemm::applies(&[g, u], n, backend) {
                crate::bitnet::quant::check_len("activations (whole rows of K)", n * k, xs.len())?;
                crate::bitnet::quant::check_len("outputs (n rows of M)", n * g.rows, out.len())?;
                let acts = quantize_rows(xs, k, par)?;
                let acts = block_gemm::Acts::new(&acts, k, backend, par)?;
                block_gemm::gated(g, u, &acts, par, out, glu)?;
                return Ok(true);
            }
        }
        let _ = (gate, up, xs, backend, par, out, glu);
        Ok(false)
    }

    /// The f32 reference: `W·scale` applied to unquantised activations, one plain sum per
    /// output (what the ternary model computes without int8 activations).
    pub fn forward_f32(&self, xs: &[f32], out: &mut [f32]) {
        let t = self.unpack();
        let (m, k) = (t.rows, t.cols);
        for (x, o) in xs.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
            for (r, y) in o.iter_mut().enumerate() {
                let dot: f32 = t.row(r).iter().zip(x).map(|(&w, &v)| w as f32 * v).sum();
                *y = dot * t.scale;
            }
        }
    }
}

/// Each row quantised to int8 (and its Σq taken) once, the rows shared out to the threads.
fn quantize_rows(xs: &[f32], k: usize, par: &dyn Parallel) -> Result<Vec<(QuantActs, i32)>, BitnetError> {
    map(par, xs.len() / k, &|j| {
        let a = quantize_activations(&xs[j * k..][..k], Rounding::HalfEven)?;
        let sum = crate::bitnet::i2s::q_sum(&a.q);
        Ok((a, sum))
    })
}

/// A LUT format's part of [`Linear::forward_many`]: every activation row's tables (built once:
/// the matrices share K and the split of K), then each block of `bm_tile` rows (one tile)
/// through `blocks`.
fn lut_blocks<L: LutMatrix>(
    ws: &[&L],
    xs: &[f32],
    backend: Backend,
    par: &dyn Parallel,
    blocks: &dyn Fn(&AccOf) -> Result<(), BitnetError>,
) -> Result<(), BitnetError> {
    let Some(first) = ws.first() else { return Ok(()) };
    let (k, tile) = (first.shape().1, first.bm_tile());
    let tables = map(par, xs.len() / k, &|j| first.tables(&xs[j * k..][..k]))?;
    blocks(&|i, j, row0, acc, scales| {
        let tiles = row0 / tile..row0 / tile + 1;
        // Pairs of activation rows share each tile's weight reads; an odd one goes alone.
        for (p, a) in acc.chunks_mut(2 * tile).enumerate() {
            let t = j + 2 * p;
            if a.len() == 2 * tile {
                ws[i].acc_tiles2([&tables[t], &tables[t + 1]], backend, tiles.clone(), a)?;
            } else {
                ws[i].acc_tiles(&tables[t], backend, tiles.clone(), a)?;
            }
        }
        for (t, s) in scales.iter_mut().enumerate() {
            *s = L::act_scale(&tables[j + t]);
        }
        Ok(())
    })
}
