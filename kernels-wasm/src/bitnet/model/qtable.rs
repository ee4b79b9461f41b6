//! Quantised output layers (and embedding tables) in ggml's Q8_0 and Q6_K, what bitnet.cpp's
//! `--quant-embd` and ik_llama.cpp's `--output-tensor-type` make of them.
//!
//! Byte layouts (ggml's):
//! - **Q8_0**: blocks of 32 values, 34 bytes: f16 `d`, then 32 × i8 `q`; value = `q·d`.
//! - **Q6_K**: super-blocks of 256 values, 210 bytes: `ql[128]` (low 4 bits), `qh[64]` (high 2
//!   bits), 16 × i8 scales, f16 `d`. Value i of sub-block j (16 values) = `d·scale_j·(L_i − 32)`,
//!   `L_i` the 6-bit code. Within each half of 128 values, codes `l`, `l + 32`, `l + 64`, `l + 96`
//!   (`l < 32`) share `qh[l]` (2 bits each, in that order); `ql[l]` holds the low nibbles of `l`
//!   and `l + 64`, `ql[l + 32]` those of `l + 32` and `l + 96`.
//!
//! As the output layer they compute logits the way ggml does in kind: the activation row is
//! quantised to the weight type's `vec_dot_type` (Q8_0 for Q8_0; Q8_K, 256 values with an f32
//! `d`, for Q6_K), each block's integer dot product is exact, and the blocks' `(d_w·d_x)·Σ` are
//! summed in f32 in block order. Every backend and thread count gives the same bits.

use super::attend::tree;
use crate::bitnet::quant::Rounding;
use crate::gguf::{f16_to_f32, f32_to_f16, GgmlType};
use alloc::vec::Vec;

/// (values, bytes) per block of a quantised table type.
pub fn block(ty: GgmlType) -> Option<(usize, usize)> {
    match ty {
        GgmlType::Q8_0 => Some((32, 34)),
        GgmlType::Q6_K => Some((256, 210)),
        _ => None,
    }
}

#[inline(always)]
fn nearest(x: f32) -> i32 {
    Rounding::HalfEven.round(x)
}

/// `x` (a whole number of blocks) in `ty`'s layout, appended to `out`.
pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        GgmlType::Q8_0 => {
            for b in x.chunks_exact(32) {
                // d = max|x|/127, so the largest value maps to ±127.
                let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
                out.extend(b.iter().map(|&v| nearest((v * id).clamp(-127.0, 127.0)) as i8 as u8));
            }
        }
        GgmlType::Q6_K => {
            for sb in x.chunks_exact(256) {
                q6_k_block(sb, out);
            }
        }
        _ => {}
    }
}

/// One Q6_K super-block: each sub-block's scale maps its largest-magnitude value to −32 (the
/// codes span −32..=31), then the 16 scales are quantised to i8 against one f16 `d`.
fn q6_k_block(x: &[f32], out: &mut Vec<u8>) {
    let signed_max = |v: &[f32]| v.iter().fold(0.0f32, |m, &a| if a.abs() > m.abs() { a } else { m });
    let scales: Vec<f32> = x.chunks_exact(16).map(|s| signed_max(s) / -32.0).collect();
    let max_scale = signed_max(&scales);
    let (d, sc): (f32, Vec<i8>) = if max_scale == 0.0 {
        (0.0, alloc::vec![0; 16])
    } else {
        let iscale = -128.0 / max_scale;
        (1.0 / iscale, scales.iter().map(|&s| nearest(iscale * s).clamp(-128, 127) as i8).collect())
    };
    // The scale is applied as the decoder sees it: d rounded to f16.
    let dh = f16_to_f32(f32_to_f16(d));
    let mut codes = [0u8; 256];
    for (j, (sub, &s)) in x.chunks_exact(16).zip(&sc).enumerate() {
        let ds = dh * s as f32;
        for (i, &v) in sub.iter().enumerate() {
            let q = if ds != 0.0 { nearest((v / ds).clamp(-32.0, 31.0)) } else { 0 };
            codes[16 * j + i] = (q + 32) as u8;
        }
    }
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for n in 0..2 {
        let c = &codes[128 * n..];
        for l in 0..32 {
            ql[64 * n + l] = (c[l] & 0xf) | ((c[l + 64] & 0xf) << 4);
            ql[64 * n + l + 32] = (c[l + 32] & 0xf) | ((c[l + 96] & 0xf) << 4);
            qh[32 * n + l] = (c[l] >> 4) | ((c[l + 32] >> 4) << 2) | ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
}

/// An activation row in the weight type's `vec_dot_type`: per block, its scale and codes.
pub struct QuantRow {
    pub d: Vec<f32>,
    pub q: Vec<i8>,
    /// Q8_0 only: per block, `−128·Σ q` over each group of four codes (the eight lanes of
    /// [`dot`]), which turns `Σ (w + 128)·q` (what an unsigned-by-signed multiply-add gives) back
    /// into `Σ w·q`.
    pub corr: Vec<i32>,
    /// Q6_K only: `Σ q` of each group of 16 codes (a sub-block), for the codes' −32 offset.
    pub bsum: Vec<i32>,
}

/// `x` as Q8_0 (per 32: `d = max|x|/127` rounded to f16, as `block_q8_0` stores it) or Q8_K
/// (per 256: `d` in f32, the largest-magnitude value mapped to −127).
pub fn quantize_acts(ty: GgmlType, x: &[f32]) -> QuantRow {
    let (n, _) = block(ty).unwrap_or((32, 34));
    let mut row = QuantRow {
        d: Vec::with_capacity(x.len() / n),
        q: Vec::with_capacity(x.len()),
        corr: Vec::new(),
        bsum: Vec::new(),
    };
    for b in x.chunks_exact(n) {
        let (d, id) = if ty == GgmlType::Q6_K {
            let max = b.iter().fold(0.0f32, |m, &a| if a.abs() > m.abs() { a } else { m });
            if max == 0.0 {
                (0.0, 0.0)
            } else {
                let iscale = -127.0 / max;
                (1.0 / iscale, iscale)
            }
        } else {
            let d = f16_to_f32(f32_to_f16(b.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0));
            (d, if d != 0.0 { 1.0 / d } else { 0.0 })
        };
        row.d.push(d);
        row.q.extend(b.iter().map(|&v| nearest((v * id).clamp(-127.0, 127.0)) as i8));
    }
    let sums = |n: usize| row.q.chunks_exact(n).map(|g| g.iter().map(|&v| v as i32).sum::<i32>()).collect::<Vec<_>>();
    match ty {
        GgmlType::Q8_0 => row.corr = sums(4).into_iter().map(|s| -128 * s).collect(),
        _ => row.bsum = sums(16),
    }
    row
}

/// One output of a Q8_0 or Q6_K table: weight row `w` (its bytes) against `x`.
///
/// Q8_0 sums in eight lanes, lane j taking the products of codes 4j..4j + 4 of every block:
/// `lane_j += (d_w·d_x)·Σ_j` in block order, then a fixed tree. The integer sums are exact, so
/// the AVX2 (`pmaddubsw`) and VNNI (`vpdpbusd`) kernels, which group the products the same
/// way, give these bits.
pub fn dot(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if ty == GgmlType::Q8_0 && x.corr.len() == x.q.len() / 4 && w.len() / 34 * 32 == x.q.len() {
        if crate::bitnet::wide::avx512() && std::is_x86_feature_detected!("avx512vnni") {
            // SAFETY: the features were detected; lengths checked just above.
            return unsafe { x86::q8_0_vnni(w, x) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
            // SAFETY: as above.
            return unsafe { x86::q8_0_avx2(w, x) };
        }
    }
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if ty == GgmlType::Q6_K
        && x.bsum.len() == x.q.len() / 16
        && w.len() / 210 * 256 == x.q.len()
        && std::is_x86_feature_detected!("avx2")
    {
        // SAFETY: AVX2 was detected; lengths checked just above.
        return unsafe { x86::q6_k_avx2(w, x) };
    }
    dot_plain(ty, w, x)
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod x86 {
    use super::QuantRow;
    use core::arch::x86_64::*;

    /// Block `b`'s weight scale times the activation's, as `dot_plain` forms it.
    #[inline(always)]
    fn scale(w: &[u8], x: &QuantRow, b: usize) -> f32 {
        crate::gguf::f16_to_f32(u16::from_le_bytes([w[34 * b], w[34 * b + 1]])) * x.d[b]
    }

    #[target_feature(enable = "avx")]
    #[inline]
    unsafe fn finish(acc: __m256) -> f32 {
        let mut l = [0.0f32; 8];
        _mm256_storeu_ps(l.as_mut_ptr(), acc);
        super::tree(&l)
    }

    /// `vpdpbusd` multiplies unsigned by signed bytes: `w ^ 0x80` is `w + 128` as unsigned, and
    /// the row's `corr` (the accumulator's start) takes the `128·Σq` back out, per lane.
    ///
    /// # Safety
    /// AVX-512 VL + VNNI; `w` whole Q8_0 blocks for `x`'s codes, `x.corr` one per four codes.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    pub unsafe fn q8_0_vnni(w: &[u8], x: &QuantRow) -> f32 {
        let flip = _mm256_set1_epi8(-128);
        let mut acc = _mm256_setzero_ps();
        for b in 0..x.d.len() {
            let wv = _mm256_xor_si256(_mm256_loadu_si256(w.as_ptr().add(34 * b + 2).cast()), flip);
            let start = _mm256_loadu_si256(x.corr.as_ptr().add(8 * b).cast());
            let s = _mm256_dpbusd_epi32(start, wv, _mm256_loadu_si256(x.q.as_ptr().add(32 * b).cast()));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(scale(w, x, b)), _mm256_cvtepi32_ps(s)));
        }
        finish(acc)
    }

    /// Q6_K: each half's 128 codes (0..=63) rebuilt from `ql`/`qh` 32 at a time, multiplied with
    /// the activations by `pmaddubsw` (at most 2·63·127, inside int16), times their sub-blocks'
    /// scales by `pmaddwd`; the codes' −32 comes off as `32·Σ scale·Σq` from the row's `bsum`.
    /// Integers throughout, so exactly the plain code's `Σ scale·Σ (code − 32)·q`.
    ///
    /// # Safety
    /// AVX2; `w` whole Q6_K blocks for `x`'s codes, `x.bsum` one per 16 codes.
    #[target_feature(enable = "avx2")]
    pub unsafe fn q6_k_avx2(w: &[u8], x: &QuantRow) -> f32 {
        let (low, high) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        let mut acc = 0.0f32;
        for b in 0..x.d.len() {
            let blk = w.as_ptr().add(210 * b);
            let sc = core::slice::from_raw_parts(blk.add(192), 16);
            let q = x.q.as_ptr().add(256 * b);
            let mut total = _mm256_setzero_si256();
            for n in 0..2 {
                let ql0 = _mm256_loadu_si256(blk.add(64 * n).cast());
                let ql1 = _mm256_loadu_si256(blk.add(64 * n + 32).cast());
                let qh = _mm256_loadu_si256(blk.add(128 + 32 * n).cast());
                let codes = [
                    _mm256_or_si256(_mm256_and_si256(ql0, low), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), high)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), high)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low), _mm256_and_si256(qh, high)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), high),
                    ),
                ];
                for (g, c) in codes.into_iter().enumerate() {
                    // Codes 32g..32g + 32 of the half: sub-blocks 8n + 2g and 8n + 2g + 1.
                    let p = _mm256_maddubs_epi16(c, _mm256_loadu_si256(q.add(128 * n + 32 * g).cast()));
                    let j = 8 * n + 2 * g;
                    let k =
                        _mm256_setr_m128i(_mm_set1_epi16(sc[j] as i8 as i16), _mm_set1_epi16(sc[j + 1] as i8 as i16));
                    total = _mm256_add_epi32(total, _mm256_madd_epi16(p, k));
                }
            }
            let mut lanes = [0i32; 8];
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total);
            let offset: i32 = sc.iter().zip(&x.bsum[16 * b..]).map(|(&k, &s)| k as i8 as i32 * s).sum();
            let s = lanes.iter().sum::<i32>() - 32 * offset;
            let dw = crate::gguf::f16_to_f32(u16::from_le_bytes([*blk.add(208), *blk.add(209)]));
            acc += dw * x.d[b] * s as f32;
        }
        acc
    }

    /// `pmaddubsw(|w|, sign(q, w))` pairs products into int16 (at most 2·127·127 < 2¹⁵), and
    /// `pmaddwd` with ones sums each lane's four: the same groups as the VNNI kernel.
    ///
    /// # Safety
    /// AVX2 + F16C; lengths as for [`q8_0_vnni`].
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn q8_0_avx2(w: &[u8], x: &QuantRow) -> f32 {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for b in 0..x.d.len() {
            let wv = _mm256_loadu_si256(w.as_ptr().add(34 * b + 2).cast());
            let qv = _mm256_loadu_si256(x.q.as_ptr().add(32 * b).cast());
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(qv, wv));
            let s = _mm256_madd_epi16(p, ones);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(scale(w, x, b)), _mm256_cvtepi32_ps(s)));
        }
        finish(acc)
    }
}

crate::bitnet::wide::wide_fn! {
    /// [`dot`] in plain code (the reference of the SIMD kernels, and Q6_K everywhere).
    pub fn dot_plain(ty: GgmlType, w: &[u8], x: &QuantRow) -> f32 {
        let mut acc = 0.0f32;
        match ty {
            GgmlType::Q8_0 => {
                let mut lanes = [0.0f32; 8];
                for ((b, q), &dx) in w.chunks_exact(34).zip(x.q.chunks_exact(32)).zip(&x.d) {
                    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]])) * dx;
                    for (j, (wg, qg)) in b[2..].chunks_exact(4).zip(q.chunks_exact(4)).enumerate() {
                        let s: i32 = wg.iter().zip(qg).map(|(&a, &c)| a as i8 as i32 * c as i32).sum();
                        lanes[j] += d * s as f32;
                    }
                }
                acc = tree(&lanes);
            }
            _ => {
                for ((b, q), &dx) in w.chunks_exact(210).zip(x.q.chunks_exact(256)).zip(&x.d) {
                    let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
                    let dw = f16_to_f32(u16::from_le_bytes([b[208], b[209]]));
                    let mut codes = [0i8; 256];
                    for n in 0..2 {
                        let (ql, qh, c) = (&ql[64 * n..], &qh[32 * n..], &mut codes[128 * n..]);
                        for l in 0..32 {
                            let h = qh[l];
                            c[l] = ((ql[l] & 0xf) | ((h & 3) << 4)) as i8 - 32;
                            c[l + 32] = ((ql[l + 32] & 0xf) | (((h >> 2) & 3) << 4)) as i8 - 32;
                            c[l + 64] = ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
                            c[l + 96] = ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
                        }
                    }
                    // |code| ≤ 32, |q| ≤ 127, 16 per sub-block, |scale| ≤ 128: far inside i32.
                    let mut s = 0i32;
                    for ((c, q), &k) in codes.chunks_exact(16).zip(q.chunks_exact(16)).zip(sc) {
                        let sub: i32 = c.iter().zip(q).map(|(&a, &b)| a as i32 * b as i32).sum();
                        s += k as i8 as i32 * sub;
                    }
                    acc += dw * dx * s as f32;
                }
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut r = crate::bitnet::random::Rng::new(seed);
        r.f32s(n, 2.0)
    }

    /// Encoded rows decode (through the GGUF reader's own dequantiser, ggml's formulas) to
    /// within each type's step of the input.
    #[test]
    fn rows_round_trip_through_the_gguf_dequantiser_within_one_step() {
        for (ty, tol) in [(GgmlType::Q8_0, 0.5 / 127.0), (GgmlType::Q6_K, 1.0 / 31.0)] {
            let x = values(1024, 1);
            let mut bytes = Vec::new();
            quantize_row(ty, &x, &mut bytes);
            let (n, size) = block(ty).unwrap();
            assert_eq!(bytes.len(), x.len() / n * size);
            let y = dequantize(ty, &bytes).unwrap();
            for (blk, (a, b)) in x.chunks(n).zip(y.chunks(n)).enumerate() {
                let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (u, v) in a.iter().zip(b) {
                    assert!((u - v).abs() <= tol * amax * 1.05 + 1e-6, "{ty:?} block {blk}: {u} vs {v}");
                }
            }
        }
        // All zeros stay zeros.
        let mut bytes = Vec::new();
        quantize_row(GgmlType::Q6_K, &[0.0; 256], &mut bytes);
        assert!(dequantize(GgmlType::Q6_K, &bytes).unwrap().iter().all(|&v| v == 0.0));
    }

    /// A row of `n` weights (one of them `big`, so its block has extreme codes) encoded as `ty`,
    /// activations for it, and the plain code's bits for their dot product, which `dot` must give.
    fn case(ty: GgmlType, n: usize, seed: u64, big: (usize, f32)) -> (Vec<u8>, QuantRow, u32) {
        let (mut w, x) = (values(n, 10 + seed), values(n, 20 + seed));
        w[big.0] = big.1;
        let mut bytes = Vec::new();
        quantize_row(ty, &w, &mut bytes);
        let xq = quantize_acts(ty, &x);
        let want = dot_plain(ty, &bytes, &xq).to_bits();
        assert_eq!(dot(ty, &bytes, &xq).to_bits(), want, "{ty:?}");
        (bytes, xq, want)
    }

    /// The SIMD Q8_0 kernels give the plain code's bits, on rows with extreme codes too.
    #[test]
    fn the_q8_0_kernels_give_the_plain_bits() {
        for seed in 0..4 {
            // (Only x86 has SIMD forms to compare; `case` checks the plain one everywhere.)
            #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))]
            let (bytes, xq, want) = case(GgmlType::Q8_0, 768, seed, (5, 1e3));
            // Each kernel this CPU has, whichever `dot` picks.
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            {
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
                    assert_eq!(unsafe { x86::q8_0_avx2(&bytes, &xq) }.to_bits(), want, "AVX2");
                }
                if std::is_x86_feature_detected!("avx512vl") && std::is_x86_feature_detected!("avx512vnni") {
                    assert_eq!(unsafe { x86::q8_0_vnni(&bytes, &xq) }.to_bits(), want, "VNNI");
                }
            }
        }
    }

    /// The AVX2 Q6_K kernel gives the plain code's bits.
    #[test]
    fn the_q6_k_kernel_gives_the_plain_bits() {
        for seed in 0..4 {
            // (Only x86 has SIMD forms to compare; `case` checks the plain one everywhere.)
            #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))]
            let (bytes, xq, want) = case(GgmlType::Q6_K, 1024, 20 + seed, (17, -50.0));
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            if std::is_x86_feature_detected!("avx2") {
                assert_eq!(unsafe { x86::q6_k_avx2(&bytes, &xq) }.to_bits(), want, "AVX2");
            }
        }
    }

    /// The integer dot equals the f64 sum of the dequantised weights times the dequantised
    /// activations, block by block, to f32 rounding.
    #[test]
    fn the_block_dot_is_the_dequantised_dot_product() {
        for ty in [GgmlType::Q8_0, GgmlType::Q6_K] {
            let (w, x) = (values(768, 2), values(768, 3));
            let mut bytes = Vec::new();
            quantize_row(ty, &w, &mut bytes);
            let wq = dequantize(ty, &bytes).unwrap();
            let xq = quantize_acts(ty, &x);
            let n = block(ty).unwrap().0;
            let want: f64 =
                wq.iter().zip(&xq.q).enumerate().map(|(i, (&a, &q))| a as f64 * q as f64 * xq.d[i / n] as f64).sum();
            let got = dot(ty, &bytes, &xq) as f64;
            assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{ty:?}: {got} vs {want}");
        }
    }
}
