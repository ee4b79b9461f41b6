//! Prompt GEMMs of I2_S matrices on AVX-512 and AVX2, 32 weight rows at a time: AMX where the
//! CPU has it, else each block unpacked to bytes for VNNI or `pmaddubsw`
//! ([`crate::bitnet::i2s::unpacked`]). A work
//! unit is one block of one matrix against every activation row, its results dequantised into
//! the output rows as the GEMM emits them.
//!
//! [`gated`] runs a gate and an up projection together: unit g computes block g of both and
//! writes only `glu(gate, up)`. The FFN's two `n × hidden` outputs are the largest rows a
//! prompt writes, and written out whole then read back for SiLU they cost more store traffic
//! than any other step; fused, the up block lives in a 64 KiB buffer per thread. Every element
//! is the same `glu` of the same two dequantised values, so the bits equal the unfused path.

use super::par::{Disjoint, Parallel};
use crate::bitnet::backend::Backend;
use crate::bitnet::i2s::{amx, unpacked, Emit, I2sLayout, I2sMatrix};
use crate::bitnet::quant::QuantActs;
use crate::bitnet::{dequantize_into, BitnetError};
use alloc::vec;
use alloc::vec::Vec;

/// An element-wise `g ← f(g, u)` over a run of gate and up outputs.
pub type Glu<'a> = dyn Fn(&mut [f32], &[f32]) + Sync + 'a;

/// Weight rows per unit.
const R: usize = unpacked::ROWS;

/// Whether the block path runs `ws` on `n` activation rows here.
pub fn applies(ws: &[&I2sMatrix], n: usize, backend: Backend) -> bool {
    matches!(backend, Backend::Avx512 | Backend::Avx2)
        && backend.is_available()
        && n >= unpacked::MIN_ROWS
        && ws.iter().all(|m| m.layout == I2sLayout::X86 && m.rows.is_multiple_of(R))
}

/// The quantised activation rows (each with its Σq), and their AMX tile packing where AMX runs.
pub struct Acts<'a> {
    q: Vec<&'a [i8]>,
    sums: Vec<i32>,
    scales: Vec<f32>,
    packed: Option<Vec<u8>>,
    /// The unpacked blocks' kernel where AMX does not run.
    backend: Backend,
}

impl<'a> Acts<'a> {
    pub fn new(
        acts: &'a [(QuantActs, i32)],
        k: usize,
        backend: Backend,
        par: &dyn Parallel,
    ) -> Result<Acts<'a>, BitnetError> {
        let n = acts.len();
        let q: Vec<&[i8]> = acts.iter().map(|a| &a.0.q[..]).collect();
        let packed = if n >= amx::MIN_ROWS && backend == Backend::Avx512 && amx::available() {
            // Packed into tile layout once, 16 rows at a time on the threads.
            let group = amx::packed_len(16, k);
            let mut packed = vec![0u8; amx::packed_len(n, k)];
            let parts = Disjoint::new(&mut packed);
            par.ranges(n.div_ceil(16), &|groups| {
                for g in groups {
                    // SAFETY: group g alone writes its part; the threads' groups are disjoint.
                    let part = unsafe { parts.range_mut(g * group..(g + 1) * group) };
                    amx::pack_group(&q[16 * g..n.min(16 * g + 16)], k, part);
                }
                Ok(())
            })?;
            Some(packed)
        } else {
            None
        };
        Ok(Acts {
            sums: acts.iter().map(|a| a.1).collect(),
            scales: acts.iter().map(|a| a.0.scale).collect(),
            q,
            packed,
            backend,
        })
    }

    /// Block `row0..row0 + 32` of `w` against every row, into `emit`.
    fn gemm(&self, w: &I2sMatrix, row0: usize, emit: &mut Emit) -> Result<(), BitnetError> {
        match &self.packed {
            Some(packed) => w.gemm_amx(&self.q, packed, &self.sums, row0, emit),
            None => w.gemm_unpacked(&self.q, &self.sums, self.backend, row0, emit),
        }
    }

    /// Block `row0..` of `w` dequantised, activation row j's 32 values to
    /// `out[j·stride + col..][..32]`.
    ///
    /// # Safety
    /// Nothing else reads or writes those ranges of `out` meanwhile.
    unsafe fn dequantised(
        &self,
        w: &I2sMatrix,
        row0: usize,
        out: &Disjoint<f32>,
        (stride, col): (usize, usize),
    ) -> Result<(), BitnetError> {
        self.gemm(w, row0, &mut |t0, runs| {
            for (t, run) in runs.chunks_exact(R).enumerate() {
                let (j, at) = (t0 + t, (t0 + t) * stride + col);
                // SAFETY: the caller's promise.
                dequantize_into(unsafe { out.range_mut(at..at + R) }, run, self.scales[j], w.scale);
            }
        })
    }
}

/// `outs[i] = acts · ws[i]ᵀ` (n rows each), the units of all matrices shared out together.
pub fn many(ws: &[&I2sMatrix], acts: &Acts, par: &dyn Parallel, outs: &mut [&mut [f32]]) -> Result<(), BitnetError> {
    let mut starts = vec![0usize];
    for w in ws {
        starts.push(starts[starts.len() - 1] + w.rows / R);
    }
    let dests: Vec<Disjoint<f32>> = outs.iter_mut().map(|o| Disjoint::new(o)).collect();
    par.ranges(starts[ws.len()], &|units| {
        for g in units {
            let i = starts.partition_point(|&s| s <= g) - 1;
            let (m, row0) = (ws[i].rows, (g - starts[i]) * R);
            // SAFETY: only unit g writes outputs row0..row0 + 32 of matrix i (in every
            // activation row), and the threads' units are disjoint.
            unsafe { acts.dequantised(ws[i], row0, &dests[i], (m, row0))? };
        }
        Ok(())
    })
}

/// `out = glu(acts · gateᵀ, acts · upᵀ)`, element by element (see the module notes).
pub fn gated(
    gate: &I2sMatrix,
    up: &I2sMatrix,
    acts: &Acts,
    par: &dyn Parallel,
    out: &mut [f32],
    glu: &Glu,
) -> Result<(), BitnetError> {
    let (m, n) = (gate.rows, acts.q.len());
    crate::bitnet::quant::check_len("up projection rows (the gate's)", m, up.rows)?;
    let dest = Disjoint::new(out);
    par.ranges(m / R, &|units| {
        let mut ups = vec![0.0f32; n * R];
        for g in units {
            let row0 = g * R;
            // SAFETY: `ups` is this thread's alone, and is read only after the call.
            unsafe { acts.dequantised(up, row0, &Disjoint::new(&mut ups), (R, 0))? };
            acts.gemm(gate, row0, &mut |t0, runs| {
                // A batch of rows finished in L1 (at most 32, AMX's), `glu` over all of it at
                // once (vector loops want more than one run), then each output stored once.
                let mut batch = [0.0f32; 32 * R];
                let batch = &mut batch[..runs.len()];
                for (t, (b, run)) in batch.chunks_exact_mut(R).zip(runs.chunks_exact(R)).enumerate() {
                    dequantize_into(b, run, acts.scales[t0 + t], gate.scale);
                }
                glu(batch, &ups[t0 * R..][..runs.len()]);
                for (t, b) in batch.chunks_exact(R).enumerate() {
                    let at = (t0 + t) * m + row0;
                    // SAFETY: only unit g writes outputs row0..row0 + 32 (in every activation
                    // row), and the threads' units are disjoint.
                    unsafe { dest.range_mut(at..at + R) }.copy_from_slice(b);
                }
            })?;
        }
        Ok(())
    })
}
