//! The embedding table (F16 or F32, `vocab × dim`), which is also the output layer when the
//! model ties them (bitnet.cpp's dummy models have no `output.weight`).
//!
//! As the output layer it computes `logits = W·x` the way ggml's F16 mul_mat does in kind: the
//! activation row is first rounded to F16 (ggml converts it to the weights' `vec_dot_type`),
//! then each dot product is summed in f32. The summation order is fixed here (32 lanes: element
//! i goes to lane i mod 32, a separate multiply and add, then a fixed tree over the lanes), so
//! the AVX2 kernel and the scalar one give the same bits on every machine.

use super::par::{Disjoint, Parallel};
use super::qtable;
use super::ModelError;
use crate::bitnet::blob::Blob;
use crate::bitnet::BitnetError;
use crate::gguf::{f16_to_f32, f32_to_f16, GgmlType};

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub rows: usize,
    pub cols: usize,
    pub ty: GgmlType,
    pub data: Blob,
}

/// Lanes of the fixed summation order.
const LANES: usize = 32;

impl Table {
    pub fn new(name: &str, rows: usize, cols: usize, ty: GgmlType, data: Blob) -> Result<Table, ModelError> {
        let row_bytes = match (ty, qtable::block(ty)) {
            (GgmlType::F16, _) => cols * 2,
            (GgmlType::F32, _) => cols * 4,
            (_, Some((n, size))) if cols.is_multiple_of(n) => cols / n * size,
            (_, Some((n, _))) => {
                return Err(ModelError::tensor(name, alloc::format!("{ty:?} rows of {cols}: not whole blocks of {n}")))
            }
            (other, None) => {
                return Err(ModelError::tensor(
                    name,
                    alloc::format!("{other:?}: embeddings and output must be F16, F32, Q8_0 or Q6_K"),
                ))
            }
        };
        if data.len() != rows * row_bytes {
            return Err(ModelError::tensor(
                name,
                alloc::format!("{} bytes for {rows}×{cols} {ty:?} (truncated?)", data.len()),
            ));
        }
        Ok(Table { rows, cols, ty, data })
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        match (self.ty, qtable::block(self.ty)) {
            (GgmlType::F16, _) => self.cols * 2,
            (_, Some((n, size))) => self.cols / n * size,
            _ => self.cols * 4,
        }
    }

    /// Row `r` as f32.
    pub fn row(&self, r: usize, out: &mut [f32]) {
        match self.ty {
            GgmlType::F16 => {
                let bytes = &self.data[r * self.cols * 2..(r + 1) * self.cols * 2];
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            GgmlType::F32 => {
                let bytes = &self.data[r * self.cols * 4..(r + 1) * self.cols * 4];
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            ty => {
                let n = self.row_bytes();
                if let Some(v) = crate::gguf::dequantize(ty, &self.data[r * n..(r + 1) * n]) {
                    out.iter_mut().zip(v).for_each(|(o, v)| *o = v);
                }
            }
        }
    }

    /// `out (n × rows) = xs (n × cols) · Wᵀ`.
    pub fn logits(&self, xs: &[f32], simd: bool, par: &dyn Parallel, out: &mut [f32]) -> Result<(), BitnetError> {
        let (m, k) = (self.rows, self.cols);
        let n = xs.len() / k;
        crate::bitnet::quant::check_len("activations (whole rows of K)", n * k, xs.len())?;
        crate::bitnet::quant::check_len("outputs (n rows of the vocabulary)", n * m, out.len())?;
        if qtable::block(self.ty).is_some() {
            let row = self.row_bytes();
            for (x, o) in xs.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
                let xq = qtable::quantize_acts(self.ty, x);
                par.split(o, 1, &|first, chunk| {
                    for (i, y) in chunk.iter_mut().enumerate() {
                        let r = first + i;
                        *y = qtable::dot(self.ty, &self.data[r * row..(r + 1) * row], &xq);
                    }
                    Ok(())
                })?;
            }
            return Ok(());
        }
        let mut xr = alloc::vec::Vec::from(xs);
        if self.ty == GgmlType::F16 {
            xr.iter_mut().for_each(|v| *v = f16_to_f32(f32_to_f16(*v)));
        }
        #[cfg(target_arch = "x86_64")]
        let rows_512 = simd && self.ty == GgmlType::F16 && k.is_multiple_of(LANES) && crate::bitnet::wide::avx512();
        for (x, o) in xr.chunks_exact(k).zip(out.chunks_exact_mut(m)) {
            // Ranges rather than one static chunk a thread: a thread that finishes first takes
            // rows from the back of the other's share (see `Parallel::ranges`).
            let dest = Disjoint::new(o);
            par.ranges(m, &|rows| {
                let first = rows.start;
                // SAFETY: `ranges` hands out disjoint ranges of 0..m.
                let chunk = unsafe { dest.range_mut(rows) };
                #[cfg(target_arch = "x86_64")]
                if rows_512 {
                    let bytes = &self.data[first * k * 2..(first + chunk.len()) * k * 2];
                    // SAFETY: AVX-512 (and F16C, which `simd` implies) were detected; `bytes` holds
                    // the chunk's rows of K halves, K a multiple of 32.
                    unsafe { x86::f16_rows_512(bytes, x, chunk) };
                    return Ok(());
                }
                for (i, y) in chunk.iter_mut().enumerate() {
                    *y = self.dot(first + i, x, simd);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    fn dot(&self, r: usize, x: &[f32], simd: bool) -> f32 {
        let k = self.cols;
        let mut lanes = [0.0f32; LANES];
        #[cfg(target_arch = "x86_64")]
        let whole = if simd { k / LANES * LANES } else { 0 };
        #[cfg(target_arch = "wasm32")]
        let whole = if simd { k / LANES * LANES } else { 0 };
        #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
        let whole = {
            let _ = simd;
            0
        };
        match self.ty {
            GgmlType::F16 => {
                let w = &self.data[r * k * 2..(r + 1) * k * 2];
                #[cfg(target_arch = "x86_64")]
                if whole > 0 {
                    // SAFETY: `simd` is only set where AVX2, F16C and FMA were detected (see
                    // `simd_available`); both slices hold `whole` values.
                    unsafe {
                        if crate::bitnet::wide::avx512() {
                            x86::f16_lanes_512(&w[..whole * 2], &x[..whole], &mut lanes)
                        } else {
                            x86::f16_lanes(&w[..whole * 2], &x[..whole], &mut lanes)
                        }
                    };
                }
                #[cfg(target_arch = "wasm32")]
                if whole > 0 {
                    // SAFETY: simd128 is assumed by the wasm build (see Backend::is_available).
                    unsafe { simd128::f16_lanes(&w[..whole * 2], &x[..whole], &mut lanes) };
                }
                for i in whole..k {
                    let wi = f16_to_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]]));
                    lanes[i % LANES] += wi * x[i];
                }
            }
            _ => {
                let w = &self.data[r * k * 4..(r + 1) * k * 4];
                #[cfg(target_arch = "x86_64")]
                if whole > 0 {
                    // SAFETY: as above.
                    unsafe { x86::f32_lanes(&w[..whole * 4], &x[..whole], &mut lanes) };
                }
                #[cfg(target_arch = "wasm32")]
                if whole > 0 {
                    // SAFETY: as above.
                    unsafe { simd128::f32_lanes(&w[..whole * 4], &x[..whole], &mut lanes) };
                }
                for i in whole..k {
                    let wi = f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
                    lanes[i % LANES] += wi * x[i];
                }
            }
        }
        reduce(&lanes)
    }
}

/// The fixed tree: the four 8-lane accumulators pairwise, then the 8 lanes as AVX2's
/// high-plus-low halves and two horizontal steps leave them.
fn reduce(l: &[f32; LANES]) -> f32 {
    let mut v = [0.0f32; 8];
    for (i, o) in v.iter_mut().enumerate() {
        *o = (l[i] + l[8 + i]) + (l[16 + i] + l[24 + i]);
    }
    let h = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// Rounds every value to the nearest F16 (ties to even) and back: F16C where the CPU has it,
/// else [`f32_to_f16`], which gives the same bits.
pub fn round_to_f16(v: &mut [f32]) {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if std::is_x86_feature_detected!("f16c") {
        // SAFETY: F16C was detected just now.
        unsafe { x86::round_to_f16(v) };
        return;
    }
    v.iter_mut().for_each(|x| *x = f16_to_f32(f32_to_f16(*x)));
}

/// `src` rounded to the nearest F16 (ties to even), as IEEE halves' bits into `dst` (as long):
/// the bits [`round_to_f16`] widens back. F16C where the CPU has it, else [`f32_to_f16`].
pub fn to_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "one half per value");
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if std::is_x86_feature_detected!("f16c") {
        // SAFETY: F16C was detected just now; the slices are one length.
        unsafe { x86::to_f16(src, dst) };
        return;
    }
    dst.iter_mut().zip(src).for_each(|(h, x)| *h = f32_to_f16(*x));
}

/// Whether this machine runs the SIMD kernels (AVX2 + F16C, or wasm simd128).
pub fn simd_available() -> bool {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(target_arch = "wasm32")]
    {
        true
    }
    #[cfg(not(any(all(target_arch = "x86_64", feature = "std"), target_arch = "wasm32")))]
    {
        false
    }
}

#[cfg(target_arch = "wasm32")]
mod simd128 {
    use core::arch::wasm32::*;

    /// Four halves (zero-extended to 32 bits) as f32x4, exactly: the exponent and mantissa
    /// moved into place and multiplied by 2¹¹² (which also renormalises subnormals), infinities
    /// and NaN given the all-ones exponent, the sign put back.
    #[inline(always)]
    fn widen(w: v128) -> v128 {
        let mag = i32x4_shl(v128_and(w, i32x4_splat(0x7fff)), 13);
        let f = f32x4_mul(mag, f32x4_splat(f32::from_bits(0x7780_0000)));
        let special = i32x4_ge(v128_and(w, i32x4_splat(0x7c00)), i32x4_splat(0x7c00));
        let inf_nan = v128_or(mag, i32x4_splat(0x7f80_0000));
        let sign = i32x4_shl(v128_and(w, i32x4_splat(0x8000)), 16);
        v128_or(v128_bitselect(inf_nan, f, special), sign)
    }

    /// Lane i mod 32 += w[i]·x[i] for F16 weights, as the scalar loop does.
    #[target_feature(enable = "simd128")]
    pub unsafe fn f16_lanes(w: &[u8], x: &[f32], lanes: &mut [f32; 32]) {
        let l = lanes.as_mut_ptr();
        let ld = |i: usize| v128_load(l.add(4 * i).cast());
        let (mut a0, mut a1, mut a2, mut a3) = (ld(0), ld(1), ld(2), ld(3));
        let (mut a4, mut a5, mut a6, mut a7) = (ld(4), ld(5), ld(6), ld(7));
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let mut i = 0;
        while i < x.len() {
            let h0 = v128_load(wp.add(2 * i).cast());
            let h1 = v128_load(wp.add(2 * i + 16).cast());
            let h2 = v128_load(wp.add(2 * i + 32).cast());
            let h3 = v128_load(wp.add(2 * i + 48).cast());
            let xv = |k: usize| v128_load(xp.add(i + 4 * k).cast());
            a0 = f32x4_add(a0, f32x4_mul(widen(u32x4_extend_low_u16x8(h0)), xv(0)));
            a1 = f32x4_add(a1, f32x4_mul(widen(u32x4_extend_high_u16x8(h0)), xv(1)));
            a2 = f32x4_add(a2, f32x4_mul(widen(u32x4_extend_low_u16x8(h1)), xv(2)));
            a3 = f32x4_add(a3, f32x4_mul(widen(u32x4_extend_high_u16x8(h1)), xv(3)));
            a4 = f32x4_add(a4, f32x4_mul(widen(u32x4_extend_low_u16x8(h2)), xv(4)));
            a5 = f32x4_add(a5, f32x4_mul(widen(u32x4_extend_high_u16x8(h2)), xv(5)));
            a6 = f32x4_add(a6, f32x4_mul(widen(u32x4_extend_low_u16x8(h3)), xv(6)));
            a7 = f32x4_add(a7, f32x4_mul(widen(u32x4_extend_high_u16x8(h3)), xv(7)));
            i += 32;
        }
        for (k, a) in [a0, a1, a2, a3, a4, a5, a6, a7].into_iter().enumerate() {
            v128_store(l.add(4 * k).cast(), a);
        }
    }

    /// The same for F32 weights.
    #[target_feature(enable = "simd128")]
    pub unsafe fn f32_lanes(w: &[u8], x: &[f32], lanes: &mut [f32; 32]) {
        let l = lanes.as_mut_ptr();
        let mut acc = [f32x4_splat(0.0); 8];
        for (j, a) in acc.iter_mut().enumerate() {
            *a = v128_load(l.add(4 * j).cast());
        }
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let mut i = 0;
        while i < x.len() {
            for (j, a) in acc.iter_mut().enumerate() {
                let wv = v128_load(wp.add(4 * (i + 4 * j)).cast());
                *a = f32x4_add(*a, f32x4_mul(wv, v128_load(xp.add(i + 4 * j).cast())));
            }
            i += 32;
        }
        for (j, a) in acc.iter().enumerate() {
            v128_store(l.add(4 * j).cast(), *a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// Lane i mod 32 += w[i]·x[i] (multiply, then add: no fusion) for F16 weights.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn f16_lanes(w: &[u8], x: &[f32], lanes: &mut [f32; 32]) {
        let (wp, xp, l) = (w.as_ptr(), x.as_ptr(), lanes.as_mut_ptr());
        let (mut a0, mut a1, mut a2, mut a3) =
            (_mm256_loadu_ps(l), _mm256_loadu_ps(l.add(8)), _mm256_loadu_ps(l.add(16)), _mm256_loadu_ps(l.add(24)));
        let half = |i: usize| _mm256_cvtph_ps(_mm_loadu_si128(wp.add(2 * i).cast()));
        let mut i = 0;
        while i < x.len() {
            // The table streams from memory once: ask for the rows a few ahead (harmless past
            // the end), so the loads overlap the arithmetic.
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(4 * w.len() + 2 * i).cast());
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(4 * w.len() + 2 * i + 32).cast());
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(half(i), _mm256_loadu_ps(xp.add(i))));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(half(i + 8), _mm256_loadu_ps(xp.add(i + 8))));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(half(i + 16), _mm256_loadu_ps(xp.add(i + 16))));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(half(i + 24), _mm256_loadu_ps(xp.add(i + 24))));
            i += 32;
        }
        _mm256_storeu_ps(l, a0);
        _mm256_storeu_ps(l.add(8), a1);
        _mm256_storeu_ps(l.add(16), a2);
        _mm256_storeu_ps(l.add(24), a3);
    }

    /// Sixteen halves at `p` as f32: two F16C conversions (exact either way; Miri cannot run
    /// the 512-bit `vcvtph2ps`).
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    #[inline]
    unsafe fn widen16(p: *const u8) -> __m512 {
        let lo = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
        let hi = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast()));
        _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
    }

    /// [`f16_lanes`] with 16-wide registers: lanes 0–15 and 16–31 in two, each lane the same
    /// multiplies and adds in the same order, so the same bits.
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub unsafe fn f16_lanes_512(w: &[u8], x: &[f32], lanes: &mut [f32; 32]) {
        let (wp, xp, l) = (w.as_ptr(), x.as_ptr(), lanes.as_mut_ptr());
        let (mut a0, mut a1) = (_mm512_loadu_ps(l), _mm512_loadu_ps(l.add(16)));
        let half = |i: usize| widen16(wp.add(2 * i));
        let mut i = 0;
        while i < x.len() {
            // As in `f16_lanes`: the rows a few ahead, harmless past the end.
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(4 * w.len() + 2 * i).cast());
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(half(i), _mm512_loadu_ps(xp.add(i))));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(half(i + 16), _mm512_loadu_ps(xp.add(i + 16))));
            i += 32;
        }
        _mm512_storeu_ps(l, a0);
        _mm512_storeu_ps(l.add(16), a1);
    }

    /// [`f16_lanes_512`] and the fixed tree of `reduce` for whole rows at once: `out[r]` is row
    /// r of `w` (K halves each, K a multiple of 32) against `x`. The lanes stay in registers and
    /// the tree runs on them (128-bit halves, then pairs, in `reduce`'s order); the weights
    /// stream without a call per row.
    #[target_feature(enable = "avx512f,avx512dq,f16c")]
    pub unsafe fn f16_rows_512(w: &[u8], x: &[f32], out: &mut [f32]) {
        let k = x.len();
        assert!(k.is_multiple_of(32) && w.len() == out.len() * k * 2);
        let xp = x.as_ptr();
        for (r, y) in out.iter_mut().enumerate() {
            let wp = w.as_ptr().add(r * k * 2);
            let half = |i: usize| widen16(wp.add(2 * i));
            let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let mut i = 0;
            while i < k {
                _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(8 * k + 2 * i).cast());
                a0 = _mm512_add_ps(a0, _mm512_mul_ps(half(i), _mm512_loadu_ps(xp.add(i))));
                a1 = _mm512_add_ps(a1, _mm512_mul_ps(half(i + 16), _mm512_loadu_ps(xp.add(i + 16))));
                i += 32;
            }
            // (l[i] + l[8 + i]) + (l[16 + i] + l[24 + i]), then the four pairs, then the last two.
            let t0 = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps::<1>(a0));
            let t1 = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps::<1>(a1));
            let v = _mm256_add_ps(t0, t1);
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let p = _mm_add_ps(h, _mm_movehl_ps(h, h));
            *y = _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
        }
    }

    /// F32 → F16 (round to nearest even) → F32, eight at a time.
    #[cfg(feature = "std")]
    #[target_feature(enable = "avx,f16c")]
    pub unsafe fn round_to_f16(v: &mut [f32]) {
        let mut chunks = v.chunks_exact_mut(8);
        for c in &mut chunks {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        for x in chunks.into_remainder() {
            *x = super::f16_to_f32(super::f32_to_f16(*x));
        }
    }

    /// F32 → F16 bits (round to nearest even), eight at a time; `dst` as long as `src`.
    #[cfg(feature = "std")]
    #[target_feature(enable = "avx,f16c")]
    pub unsafe fn to_f16(src: &[f32], dst: &mut [u16]) {
        let whole = src.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(i)));
            _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
        }
        for (h, x) in dst[whole..].iter_mut().zip(&src[whole..]) {
            *h = super::f32_to_f16(*x);
        }
    }

    /// The same for F32 weights.
    #[target_feature(enable = "avx2")]
    pub unsafe fn f32_lanes(w: &[u8], x: &[f32], lanes: &mut [f32; 32]) {
        let mut acc = [_mm256_setzero_ps(); 4];
        for (c, lane) in acc.iter_mut().enumerate() {
            *lane = _mm256_loadu_ps(lanes.as_ptr().add(8 * c));
        }
        for i in (0..x.len()).step_by(32) {
            for (c, a) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_ps(w.as_ptr().add(4 * (i + 8 * c)).cast());
                let xv = _mm256_loadu_ps(x.as_ptr().add(i + 8 * c));
                *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, xv));
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * c), *a);
        }
    }
}
