//! I2_S on x86-64: AVX2 (`pmaddubsw`, as bitnet.cpp) and AVX-512 VNNI (`vpdpbusd`, which
//! multiplies the unsigned codes by the signed activations and sums four products per int32 lane
//! in one instruction, so no int16 stage is needed).

use core::arch::x86_64::*;

/// `Σ code·q` for one row in the x86 layout (blocks of 32 bytes = 128 weights).
///
/// # Safety
/// The CPU must support AVX2; `q.len() == codes.len() * 4`.
#[target_feature(enable = "avx2")]
pub unsafe fn dot_avx2(codes: &[u8], q: &[i8]) -> i32 {
    let mask = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_si256();
    for (b, chunk) in codes.chunks_exact(32).enumerate() {
        let v = _mm256_loadu_si256(chunk.as_ptr().cast());
        let qb = q.as_ptr().add(b * 128);
        let load = |plane: usize| _mm256_loadu_si256(qb.add(plane * 32).cast());
        // Each pmaddubsw lane is at most 2·2·128 = 512 in magnitude, four of them 2048: int16 is safe.
        let mut s16 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 6), mask), load(0));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), mask), load(1)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 2), mask), load(2)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(v, mask), load(3)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s16, ones));
    }
    hsum256(acc)
}

/// Rows ahead of the current ones that `dot4x2_avx2` prefetches (the next quads').
const PREFETCH_ROWS: usize = 8;

/// `Σ code·q` for four rows at once: the activation loads are shared, and four independent
/// accumulation chains keep more loads of the weight stream in flight.
///
/// # Safety
/// The CPU must support AVX2; every row and `q` as in [`dot_avx2`].
#[target_feature(enable = "avx2")]
pub unsafe fn dot4_avx2(rows: [&[u8]; 4], q: &[i8]) -> [i32; 4] {
    let mask = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); 4];
    for b in 0..rows[0].len() / 32 {
        let qb = q.as_ptr().add(b * 128);
        let qs = [
            _mm256_loadu_si256(qb.cast()),
            _mm256_loadu_si256(qb.add(32).cast()),
            _mm256_loadu_si256(qb.add(64).cast()),
            _mm256_loadu_si256(qb.add(96).cast()),
        ];
        // The weights stream from memory once: ask for them well ahead, so the loads overlap
        // the arithmetic.
        prefetch_stream(rows[0].as_ptr(), b);
        for (a, row) in acc.iter_mut().zip(rows) {
            let v = _mm256_loadu_si256(row.as_ptr().add(b * 32).cast());
            // As in `dot_avx2`: four pmaddubsw lanes of at most 512 each fit int16.
            let s0 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 6), mask), qs[0]);
            let s1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), mask), qs[1]);
            let s2 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 2), mask), qs[2]);
            let s3 = _mm256_maddubs_epi16(_mm256_and_si256(v, mask), qs[3]);
            let s16 = _mm256_add_epi16(_mm256_add_epi16(s0, s1), _mm256_add_epi16(s2, s3));
            *a = _mm256_add_epi32(*a, _mm256_madd_epi16(s16, ones));
        }
    }
    [hsum256(acc[0]), hsum256(acc[1]), hsum256(acc[2]), hsum256(acc[3])]
}

/// [`dot4_avx2`] for two activation rows at once (prompt processing): each weight byte is
/// loaded and split into its four 2-bit planes once for both rows.
///
/// # Safety
/// The CPU must support AVX2; every row and both `q`s as in [`dot_avx2`].
#[target_feature(enable = "avx2")]
pub unsafe fn dot4x2_avx2(rows: [&[u8]; 4], q: [&[i8]; 2]) -> [[i32; 4]; 2] {
    let mask = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 4]; 2];
    for b in 0..rows[0].len() / 32 {
        let (qa, qb) = (q[0].as_ptr().add(b * 128), q[1].as_ptr().add(b * 128));
        for r in 0..4 {
            let row = rows[r];
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(PREFETCH_ROWS * row.len() + b * 32).cast());
            let v = _mm256_loadu_si256(row.as_ptr().add(b * 32).cast());
            let p0 = _mm256_and_si256(_mm256_srli_epi16(v, 6), mask);
            let p1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            let p2 = _mm256_and_si256(_mm256_srli_epi16(v, 2), mask);
            let p3 = _mm256_and_si256(v, mask);
            let a0 = _mm256_maddubs_epi16(p0, _mm256_loadu_si256(qa.cast()));
            let a1 = _mm256_maddubs_epi16(p1, _mm256_loadu_si256(qa.add(32).cast()));
            let a2 = _mm256_maddubs_epi16(p2, _mm256_loadu_si256(qa.add(64).cast()));
            let a3 = _mm256_maddubs_epi16(p3, _mm256_loadu_si256(qa.add(96).cast()));
            let b0 = _mm256_maddubs_epi16(p0, _mm256_loadu_si256(qb.cast()));
            let b1 = _mm256_maddubs_epi16(p1, _mm256_loadu_si256(qb.add(32).cast()));
            let b2 = _mm256_maddubs_epi16(p2, _mm256_loadu_si256(qb.add(64).cast()));
            let b3 = _mm256_maddubs_epi16(p3, _mm256_loadu_si256(qb.add(96).cast()));
            let sa = _mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3));
            let sb = _mm256_add_epi16(_mm256_add_epi16(b0, b1), _mm256_add_epi16(b2, b3));
            acc[0][r] = _mm256_add_epi32(acc[0][r], _mm256_madd_epi16(sa, ones));
            acc[1][r] = _mm256_add_epi32(acc[1][r], _mm256_madd_epi16(sb, ones));
        }
    }
    let mut out = [[0; 4]; 2];
    for t in 0..2 {
        for r in 0..4 {
            out[t][r] = hsum256(acc[t][r]);
        }
    }
    out
}

/// Two blocks per 512-bit register; a leftover odd block goes through AVX2.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; `q.len() == codes.len() * 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_avx512(codes: &[u8], q: &[i8]) -> i32 {
    let mask = _mm512_set1_epi8(3);
    let mut acc = _mm512_setzero_si512();
    let pairs = codes.len() / 64;
    for p in 0..pairs {
        let v = _mm512_loadu_si512(codes.as_ptr().add(p * 64).cast());
        let (q0, q1) = (q.as_ptr().add(p * 256), q.as_ptr().add(p * 256 + 128));
        // Bytes 0–31 of the register belong to the first block, 32–63 to the second: pair
        // each with its own block's activations.
        let acts = |plane: usize| {
            let lo = _mm256_loadu_si256(q0.add(plane * 32).cast());
            let hi = _mm256_loadu_si256(q1.add(plane * 32).cast());
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
        };
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(v, 6), mask), acts(0));
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask), acts(1));
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(v, 2), mask), acts(2));
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(v, mask), acts(3));
    }
    let mut total = _mm512_reduce_add_epi32(acc);
    if !codes.len().is_multiple_of(64) {
        total += dot_avx2(&codes[pairs * 64..], &q[pairs * 256..]);
    }
    total
}

/// Rows ahead that [`tile_avx512`] prefetches: a 32-row block's worth, so generation (one
/// activation row, the weights streamed once) keeps a block's loads in flight.
const PREFETCH_ROWS_512: usize = 16;

/// A 32-byte I2_S block (128 weights) broadcast to both halves of a register.
///
/// # Safety
/// AVX-512 F; 32 readable bytes at `p`.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn broadcast_block(p: *const u8) -> __m512i {
    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()))
}

/// The codes of weights 0–63 (`H = 0`) or 64–127 (`H = 1`) of a block from
/// [`broadcast_block`], in order: the low half shifted by 6 (2), the high half by 4 (0), each byte
/// masked to its 2 bits, so planes 0 and 1 (2 and 3) sit side by side. (A masked shift rather
/// than `vpsrlvq`, which Miri cannot interpret.)
///
/// # Safety
/// AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(super) unsafe fn plane_pair<const H: usize>(raw: __m512i) -> __m512i {
    const HIGH: __mmask32 = 0xFFFF_0000;
    let w = if H == 0 {
        _mm512_mask_srli_epi16::<4>(_mm512_srli_epi16::<6>(raw), HIGH, raw)
    } else {
        _mm512_mask_mov_epi16(_mm512_srli_epi16::<2>(raw), HIGH, raw)
    };
    _mm512_and_si512(w, _mm512_set1_epi8(3))
}

/// `Σ code·q` of four weight rows against `N` activation rows: the int8 GEMM micro-tile of
/// prompt processing (and, with `N = 1`, of generation) on AVX-512 VNNI.
///
/// Each 32-byte block (128 weights) is broadcast to both halves of a register and split by
/// [`plane_pair`] into the codes of weights 0–63 and 64–127 in order, so they meet the block's
/// activations as two plain loads: no permutation of either operand, and any K that is a whole
/// number of blocks. Every product is exact in int32 (|code·q| ≤ 256, K ≤ 2²⁰ per row), so the
/// order of the sums cannot change a bit. `4·N` accumulators stay in registers for the whole row.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; every row `K/4` bytes, every `q` `K` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile_avx512<const N: usize>(rows: [&[u8]; 4], q: [&[i8]; N]) -> [[i32; 4]; N] {
    let mut acc = [[_mm512_setzero_si512(); 4]; N];
    let stride = rows[0].len();
    for b in 0..stride / 32 {
        for row in rows {
            // Harmless past the end of the matrix: a prefetch never faults.
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(PREFETCH_ROWS_512 * stride + b * 32).cast());
        }
        let raw: [__m512i; 4] = core::array::from_fn(|r| broadcast_block(rows[r].as_ptr().add(b * 32)));
        let acts = |h: usize| -> [__m512i; N] {
            core::array::from_fn(|n| _mm512_loadu_si512(q[n].as_ptr().add(b * 128 + h * 64).cast()))
        };
        let a = acts(0);
        for (r, &raw) in raw.iter().enumerate() {
            let w = plane_pair::<0>(raw);
            for n in 0..N {
                acc[n][r] = _mm512_dpbusd_epi32(acc[n][r], w, a[n]);
            }
        }
        let a = acts(1);
        for (r, &raw) in raw.iter().enumerate() {
            let w = plane_pair::<1>(raw);
            for n in 0..N {
                acc[n][r] = _mm512_dpbusd_epi32(acc[n][r], w, a[n]);
            }
        }
    }
    let mut out = [[0i32; 4]; N];
    for (o, a) in out.iter_mut().zip(&acc) {
        *o = hsum4_512(*a);
    }
    out
}

/// How far ahead generation's tiles prefetch their weight stream, into L1 and into L2.
///
/// A tile reads a quad of consecutive rows, 32 bytes from each per step: 128 bytes a step of a
/// stream that runs through the matrix in order, since the quads follow one another in memory
/// (I2_S rows are `K/4` bytes, row after row). Prefetching that stream where it lies, two lines
/// a step at a fixed distance in bytes, gives the core's prefetchers one sequential stream
/// instead of a prefetch per row at a distance that grew with the row's length: 8 rows ahead
/// was 3 KiB on a 1536-wide row and 18 KiB on the 9216-wide down projection. 1.5B generation
/// went from 69–72 % to 73–76 % of the streaming cap with AVX-512 and from 61–63 % to 65 % on
/// AVX2 (Intel Xeon, 2 cores, 2026-12-03, alternating builds); nearer (1/8, 2/12 KiB) or
/// farther (8/48, 8/96, 16/64 KiB) was no better, and without the L2 prefetch a plain stream
/// of 9216-wide rows read at 24 GB/s against 31.
const STREAM_L1: usize = 3 << 10;
const STREAM_L2: usize = 18 << 10;

/// Prefetches step `step` of the weight stream that starts at `first`: see [`STREAM_L1`].
/// Past the end of the matrix is harmless: a prefetch never faults.
#[inline(always)]
fn prefetch_stream(first: *const u8, step: usize) {
    let at = |ahead: usize| first.wrapping_add(ahead + step * 128).cast::<i8>();
    // SAFETY: prefetches (SSE, part of x86-64) read nothing and never fault.
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(at(STREAM_L1));
        _mm_prefetch::<_MM_HINT_T0>(at(STREAM_L1 + 64));
        _mm_prefetch::<_MM_HINT_T1>(at(STREAM_L2));
        _mm_prefetch::<_MM_HINT_T1>(at(STREAM_L2 + 64));
    }
}

/// [`tile_avx512`] for one or two activation rows (generation), with half its vector work.
///
/// The planes are masked in place instead of shifted down: after the broadcast, `0xC0 | 0x30`
/// leaves the codes of weights 0–63 scaled by 64 (low half) and 16 (high half), and `0x0C | 0x03`
/// those of weights 64–127 scaled by 4 and 1. Each accumulator lane then sums one plane only,
/// so its total is a multiple of that plane's scale, and an exact arithmetic shift per half
/// recovers `Σ code·q` before the rows are reduced. Two `vpand` per block replace two shifts, a
/// blend and two `vpand`, and the stream has more of the core to itself.
///
/// Exactness: a masked byte is at most 3·64 = 192 and |q| ≤ 128, so a lane gains at most
/// 4·192·128 per block; over K/128 blocks that stays below 2³¹ for every K ≤ 2²⁰, and `vpdpbusd`
/// does not saturate.
///
/// # Safety
/// As [`tile_avx512`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile_avx512_masked<const N: usize>(rows: [&[u8]; 4], q: [&[i8]; N]) -> [[i32; 4]; N] {
    const LOW: __mmask64 = 0x0000_0000_FFFF_FFFF;
    let lo_mask = _mm512_mask_blend_epi8(LOW, _mm512_set1_epi8(0x30), _mm512_set1_epi8(0xC0_u8 as i8));
    let hi_mask = _mm512_mask_blend_epi8(LOW, _mm512_set1_epi8(0x03), _mm512_set1_epi8(0x0C));
    let mut lo = [[_mm512_setzero_si512(); 4]; N];
    let mut hi = [[_mm512_setzero_si512(); 4]; N];
    let stride = rows[0].len();
    for b in 0..stride / 32 {
        prefetch_stream(rows[0].as_ptr(), b);
        let raw: [__m512i; 4] = core::array::from_fn(|r| broadcast_block(rows[r].as_ptr().add(b * 32)));
        let a0: [__m512i; N] = core::array::from_fn(|n| _mm512_loadu_si512(q[n].as_ptr().add(b * 128).cast()));
        let a1: [__m512i; N] = core::array::from_fn(|n| _mm512_loadu_si512(q[n].as_ptr().add(b * 128 + 64).cast()));
        for (r, &raw) in raw.iter().enumerate() {
            let (w0, w1) = (_mm512_and_si512(raw, lo_mask), _mm512_and_si512(raw, hi_mask));
            for n in 0..N {
                lo[n][r] = _mm512_dpbusd_epi32(lo[n][r], w0, a0[n]);
                hi[n][r] = _mm512_dpbusd_epi32(hi[n][r], w1, a1[n]);
            }
        }
    }
    // Lanes 0–7 came from the low half of the broadcast, 8–15 from the high half.
    const HIGH_LANES: __mmask16 = 0xFF00;
    let mut out = [[0i32; 4]; N];
    for n in 0..N {
        let rows: [__m512i; 4] = core::array::from_fn(|r| {
            let l = _mm512_mask_srai_epi32::<4>(_mm512_srai_epi32::<6>(lo[n][r]), HIGH_LANES, lo[n][r]);
            let h = _mm512_mask_mov_epi32(_mm512_srai_epi32::<2>(hi[n][r]), HIGH_LANES, hi[n][r]);
            _mm512_add_epi32(l, h)
        });
        out[n] = hsum4_512(rows);
    }
    out
}

/// The four totals of four accumulators: two rounds of interleave-and-add leave each 128-bit
/// lane holding `[Σa, Σb, Σc, Σd]` of its part, then the four lanes are added.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn hsum4_512_vec(a: [__m512i; 4]) -> __m128i {
    let ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    let cd = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    let s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    let s = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s));
    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s))
}

#[target_feature(enable = "avx512f")]
unsafe fn hsum4_512(a: [__m512i; 4]) -> [i32; 4] {
    let mut out = [0i32; 4];
    _mm_storeu_si128(out.as_mut_ptr().cast(), hsum4_512_vec(a));
    out
}

/// [`hsum4_512_vec`] for 256-bit accumulators.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn hsum4_256_vec(a: [__m256i; 4]) -> __m128i {
    let ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]), _mm256_unpackhi_epi32(a[0], a[1]));
    let cd = _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]), _mm256_unpackhi_epi32(a[2], a[3]));
    let s = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s))
}

#[target_feature(enable = "avx2")]
unsafe fn hsum256(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}
