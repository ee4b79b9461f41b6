//! I2_S prompt processing without AMX — AVX-512 VNNI (AMD Zen 4, or `SUBSTRATES_NO_AMX=1`) and
//! AVX2: a 32-row weight block is unpacked to one code byte per weight once per work unit, then
//! every activation row meets plain byte loads.
//!
//! Why: the streaming tile ([`super::x86::tile_avx512`]) splits the 2-bit planes on every use,
//! three shift/mask instructions per 64 codes competing with `vpdpbusd` for the vector ports.
//! Over a GEMM of n activation rows that is n/4 times the same work; here it is done once, and
//! the inner loop is loads and `vpdpbusd` only.
//!
//! Layout (the AMX A-tile layout, so both paths share [`unpack_block`]): half h (rows
//! 16h..16h + 16), chunk c (K values 64c..64c + 64) at `(h·chunks + c)·1024`, row m of the half
//! at `+ 64m`, its 64 codes in K order. Four consecutive rows of one chunk are 256 contiguous
//! bytes.
//!
//! Exactness: every product and sum is int32 and cannot overflow (|code·q| ≤ 256, K ≤ 2²⁰), so
//! the order of the sums does not change a bit against the plain dot product. AVX2 has no
//! `vpdpbusd`; its `pmaddubsw` sums two products into an int16 lane, which the tile adds up in
//! int16 over [`SEGMENT`] codes before widening (the bound is there).

use super::x86;
use core::arch::x86_64::*;

/// Weight rows per block.
pub const ROWS: usize = 32;

/// Codes per chunk.
const CHUNK: usize = 64;

/// Bytes of one half's chunk (16 rows × 64 codes).
const HALF_CHUNK: usize = 16 * CHUNK;

/// Codes per int16 segment of the AVX2 tile. A code is at most 3 (2 bits, whatever the file
/// holds) and |q| ≤ 128, so a `pmaddubsw` lane is at most 768 in magnitude; a lane adds one
/// per 32 codes, 32 of them over a segment: 24,576 < 2¹⁵ (and `pmaddubsw` itself, at most
/// 768, never saturates). Widened to int32 after each segment, the sum is exact for any K.
pub const SEGMENT: usize = 1024;

/// Activation rows below which the streaming tile is as fast (unpacking costs about four
/// activation rows' worth of tile work).
pub const MIN_ROWS: usize = 8;

/// Bytes [`unpack_block`] writes for K values per row.
pub const fn unpacked_len(k: usize) -> usize {
    ROWS * k
}

/// The 32 rows of `rows` (I2_S x86 codes, `k/4` bytes each) one code per byte, in the layout
/// above.
///
/// # Safety
/// AVX-512 F and BW; `rows` holds 32 rows of `k/4` bytes, k a multiple of 128; `out` holds
/// [`unpacked_len`]`(k)` bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn unpack_block(rows: &[u8], k: usize, out: &mut [u8]) {
    debug_assert!(rows.len() >= ROWS * k / 4 && out.len() >= unpacked_len(k));
    let (stride, chunks, base) = (k / 4, k / CHUNK, out.as_mut_ptr());
    for r in 0..ROWS {
        let (h, m) = (r / 16, r % 16);
        for b in 0..stride / 32 {
            // As in `tile_avx512`: one 32-byte block gives chunks 2b (weights 0–63) and 2b + 1.
            let raw = x86::broadcast_block(rows.as_ptr().add(r * stride + b * 32));
            let at = |c: usize| base.add((h * chunks + c) * HALF_CHUNK + m * CHUNK).cast();
            _mm512_storeu_si512(at(2 * b), x86::plane_pair::<0>(raw));
            _mm512_storeu_si512(at(2 * b + 1), x86::plane_pair::<1>(raw));
        }
    }
}

/// [`unpack_block`] on AVX2: the same bytes.
///
/// # Safety
/// AVX2; as [`unpack_block`].
#[target_feature(enable = "avx2")]
pub unsafe fn unpack_block_avx2(rows: &[u8], k: usize, out: &mut [u8]) {
    debug_assert!(rows.len() >= ROWS * k / 4 && out.len() >= unpacked_len(k));
    let (stride, chunks, base) = (k / 4, k / CHUNK, out.as_mut_ptr());
    let mask = _mm256_set1_epi8(3);
    for r in 0..ROWS {
        let (h, m) = (r / 16, r % 16);
        for b in 0..stride / 32 {
            // Plane p (shift 6 − 2p) holds weights 32p..32p + 32 of the block: planes 0 and 1
            // make chunk 2b, planes 2 and 3 chunk 2b + 1.
            let v = _mm256_loadu_si256(rows.as_ptr().add(r * stride + b * 32).cast());
            let at = |c: usize, half: usize| base.add((h * chunks + c) * HALF_CHUNK + m * CHUNK + 32 * half).cast();
            _mm256_storeu_si256(at(2 * b, 0), _mm256_and_si256(_mm256_srli_epi16::<6>(v), mask));
            _mm256_storeu_si256(at(2 * b, 1), _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask));
            _mm256_storeu_si256(at(2 * b + 1, 0), _mm256_and_si256(_mm256_srli_epi16::<2>(v), mask));
            _mm256_storeu_si256(at(2 * b + 1, 1), _mm256_and_si256(v, mask));
        }
    }
}

/// The block kernels' promises on their arguments, checked (see [`block`]).
fn check(w: &[u8], k: usize, q: &[&[i8]], sums: &[i32], acc: &[i32]) {
    assert!(q.len() <= 4 && sums.len() == q.len() && acc.len() >= ROWS * q.len() && w.len() >= unpacked_len(k));
    assert!(q.iter().all(|q| q.len() >= k));
}

/// Where rows `4·quad..` of the unpacked block start: half `quad / 4`, row `4·(quad % 4)` of it.
///
/// # Safety
/// `w` is a whole unpacked block for `chunks` chunks (checked by [`check`]), `quad < 8`.
#[inline(always)]
unsafe fn quad_base(w: &[u8], chunks: usize, quad: usize) -> *const u8 {
    let (h, m) = (quad / 4, 4 * (quad % 4));
    w.as_ptr().add(h * chunks * HALF_CHUNK + m * CHUNK)
}

/// Activation row t's four sums of rows `4·quad..`, less its Σq, into its run of `acc`.
///
/// # Safety
/// SSE2 (every x86-64); `acc` holds `32·(t + 1)` values (checked by [`check`]), `quad < 8`.
#[inline(always)]
unsafe fn store(acc: &mut [i32], sums: &[i32], t: usize, quad: usize, s: __m128i) {
    let v = _mm_sub_epi32(s, _mm_set1_epi32(sums[t]));
    _mm_storeu_si128(acc.as_mut_ptr().add(t * ROWS + 4 * quad).cast(), v);
}

/// `Σ code·q − Σq` of the 32 unpacked rows `w` against up to four activation rows `q` (`sums`
/// their Σq): run t of `acc` (32 values) gets activation row t's.
///
/// # Safety
/// AVX-512 F, BW and VNNI; `w` from [`unpack_block`] for `k`; every `q` k values; `acc` holds
/// `32·q.len()` values; `q.len() ≤ 4`, `sums.len() == q.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn block(w: &[u8], k: usize, q: &[&[i8]], sums: &[i32], acc: &mut [i32]) {
    check(w, k, q, sums, acc);
    let chunks = k / CHUNK;
    for quad in 0..ROWS / 4 {
        let base = quad_base(w, chunks, quad);
        let mut put = |t: usize, s: __m128i| store(acc, sums, t, quad, s);
        match *q {
            [a, b, c, d] => tile(base, chunks, [a, b, c, d]).into_iter().enumerate().for_each(|(t, s)| put(t, s)),
            [a, b, c] => tile(base, chunks, [a, b, c]).into_iter().enumerate().for_each(|(t, s)| put(t, s)),
            [a, b] => tile(base, chunks, [a, b]).into_iter().enumerate().for_each(|(t, s)| put(t, s)),
            [a] => tile(base, chunks, [a]).into_iter().enumerate().for_each(|(t, s)| put(t, s)),
            _ => {}
        }
    }
}

/// Four unpacked weight rows (row r of chunk c at `w + c·1024 + 64r`) against `N` activation
/// rows: `4·N` accumulators, per chunk four weight loads, `N` activation loads and `4·N`
/// `vpdpbusd`. The sums of each activation row's four weight rows, in row order.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
#[allow(clippy::needless_range_loop)] // register tiles read best as indices
unsafe fn tile<const N: usize>(w: *const u8, chunks: usize, q: [&[i8]; N]) -> [__m128i; N] {
    let mut acc = [[_mm512_setzero_si512(); 4]; N];
    for c in 0..chunks {
        let a: [__m512i; N] = core::array::from_fn(|n| _mm512_loadu_si512(q[n].as_ptr().add(c * CHUNK).cast()));
        for r in 0..4 {
            let wr = _mm512_loadu_si512(w.add(c * HALF_CHUNK + r * CHUNK).cast());
            for n in 0..N {
                acc[n][r] = _mm512_dpbusd_epi32(acc[n][r], wr, a[n]);
            }
        }
    }
    core::array::from_fn(|n| x86::hsum4_512_vec(acc[n]))
}

/// [`block`] on AVX2: the activation rows two at a time.
///
/// # Safety
/// AVX2; otherwise as [`block`].
#[target_feature(enable = "avx2")]
pub unsafe fn block_avx2(w: &[u8], k: usize, q: &[&[i8]], sums: &[i32], acc: &mut [i32]) {
    check(w, k, q, sums, acc);
    let chunks = k / CHUNK;
    for quad in 0..ROWS / 4 {
        let base = quad_base(w, chunks, quad);
        for (t0, pair) in q.chunks(2).enumerate() {
            let totals: &[__m128i] = match *pair {
                [a, b] => &tile_avx2(base, chunks, [a, b]),
                [a] => &tile_avx2(base, chunks, [a]),
                _ => &[],
            };
            for (t, &s) in (2 * t0..).zip(totals) {
                store(acc, sums, t, quad, s);
            }
        }
    }
}

/// Four unpacked weight rows against `N` activation rows on AVX2: per 32 codes four weight
/// loads, `N` activation loads, `4·N` `pmaddubsw` and `4·N` int16 adds; the int16 sums widen
/// to int32 once per [`SEGMENT`] (the bound is there).
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::needless_range_loop)] // register tiles read best as indices
unsafe fn tile_avx2<const N: usize>(w: *const u8, chunks: usize, q: [&[i8]; N]) -> [__m128i; N] {
    let ones = _mm256_set1_epi16(1);
    let mut wide = [[_mm256_setzero_si256(); 4]; N];
    for c0 in (0..chunks).step_by(SEGMENT / CHUNK) {
        let mut narrow = [[_mm256_setzero_si256(); 4]; N];
        for c in c0..chunks.min(c0 + SEGMENT / CHUNK) {
            for half in 0..2 {
                let at = c * CHUNK + 32 * half;
                let a: [__m256i; N] = core::array::from_fn(|n| _mm256_loadu_si256(q[n].as_ptr().add(at).cast()));
                for r in 0..4 {
                    let wr = _mm256_loadu_si256(w.add(c * HALF_CHUNK + r * CHUNK + 32 * half).cast());
                    for n in 0..N {
                        narrow[n][r] = _mm256_add_epi16(narrow[n][r], _mm256_maddubs_epi16(wr, a[n]));
                    }
                }
            }
        }
        for n in 0..N {
            for r in 0..4 {
                wide[n][r] = _mm256_add_epi32(wide[n][r], _mm256_madd_epi16(narrow[n][r], ones));
            }
        }
    }
    core::array::from_fn(|n| x86::hsum4_256_vec(wide[n]))
}
