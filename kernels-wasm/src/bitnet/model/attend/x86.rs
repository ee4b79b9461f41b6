//! Attention's sums with 8- and 16-wide registers: mul then add, or fused where `F` (the
//! products are exact: see the parent's notes), either way the same roundings.

use super::Kv;
use core::arch::x86_64::*;

/// Whether the AVX forms can run: AVX2, FMA and F16C (every AVX2 CPU has all three; F16C
/// widens an F16 cache's rows as they load).
pub fn avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Asks for elements `from..from + len` of `rows` toward L1, a line at a time; nothing past
/// the end. A hint: no result depends on it.
#[inline(always)]
pub fn prefetch<K>(rows: &[K], from: usize, len: usize) {
    let end = rows.len().min(from + len);
    let size = core::mem::size_of::<K>();
    for i in (from..end).step_by(64 / size) {
        // SAFETY: `i` is inside `rows`; prefetching has no other precondition (SSE is in x86-64).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(rows.as_ptr().add(i).cast()) };
    }
}

/// `acc + a·b`, fused where `F`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn madd512<const F: bool>(acc: __m512, a: __m512, b: __m512) -> __m512 {
    if F {
        _mm512_fmadd_ps(a, b, acc)
    } else {
        _mm512_add_ps(acc, _mm512_mul_ps(a, b))
    }
}

/// `acc + a·b`, fused where `F`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn madd256<const F: bool>(acc: __m256, a: __m256, b: __m256) -> __m256 {
    if F {
        _mm256_fmadd_ps(a, b, acc)
    } else {
        _mm256_add_ps(acc, _mm256_mul_ps(a, b))
    }
}

/// Whether the AVX-512 forms can run (F for the arithmetic, DQ for the 256-bit inserts).
pub fn avx512() -> bool {
    crate::bitnet::wide::avx512()
}

/// `dot` of each of `Q` queries with eight rows at once, two rows per 512-bit register (row
/// r's eight lanes in one half): lane j of each row still sums elements j, j + 8, … in
/// order, with the same query chunk in both halves; each key chunk is loaded once for all
/// `Q` queries. The fixed tree then runs on all eight rows together: 128-bit halves added
/// (`l_i + l_{i+4}`), then 64-bit halves, then the last pair, each step the same additions
/// in the same order as [`super::tree`], only across rows side by side.
///
/// # Safety
/// AVX-512 F and DQ (every such CPU has F16C); every query's length a multiple of 8 and every row as long as it.
#[target_feature(enable = "avx512f,avx512dq,f16c")]
pub unsafe fn dot8_512<const Q: usize, const F: bool, K: Kv>(a: [&[f32]; Q], b: [&[K]; 8]) -> [[f32; 8]; Q] {
    let d = a[0].len();
    assert!(d.is_multiple_of(8) && a.iter().all(|q| q.len() == d) && b.iter().all(|r| r.len() == d));
    let mut acc = [[_mm512_setzero_ps(); 4]; Q];
    for t in (0..d).step_by(8) {
        let q: [__m512; Q] = core::array::from_fn(|i| _mm512_broadcast_f32x8(_mm256_loadu_ps(a[i].as_ptr().add(t))));
        for j in 0..4 {
            let lo = _mm512_castps256_ps512(K::load8(b[2 * j].as_ptr().add(t)));
            let k = _mm512_insertf32x8::<1>(lo, K::load8(b[2 * j + 1].as_ptr().add(t)));
            for i in 0..Q {
                acc[i][j] = madd512::<F>(acc[i][j], q[i], k);
            }
        }
    }
    core::array::from_fn(|i| tree8(acc[i]))
}

/// The fixed tree of [`dot8_512`] on one query's four accumulators.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
unsafe fn tree8(acc: [__m512; 4]) -> [f32; 8] {
    // 128-bit lane L of `x` holds rows L's lanes 0–3 (rows 0–3), of `y` their lanes 4–7.
    let half = |a: __m512, b: __m512| {
        let x = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let y = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        _mm512_add_ps(x, y)
    };
    let (r0, r4) = (half(acc[0], acc[1]), half(acc[2], acc[3]));
    // Per lane L: (l0+l4) + (l2+l6) and (l1+l5) + (l3+l7) of rows L and L + 4.
    let t = _mm512_add_ps(_mm512_shuffle_ps::<0x44>(r0, r4), _mm512_shuffle_ps::<0xEE>(r0, r4));
    // The last addition: lane L = [s_L, s_{L+4}, …].
    let s = _mm512_add_ps(_mm512_shuffle_ps::<0x88>(t, t), _mm512_shuffle_ps::<0xDD>(t, t));
    let mut lanes = [0.0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), s);
    core::array::from_fn(|r| lanes[4 * (r % 4) + r / 4])
}

/// Elements an AVX-512 register holds; [`accumulate_512`] takes outputs a multiple of it.
pub const L512: usize = 16;

/// `accumulate` for `Q` outputs (each `o.len()` a multiple of 16) whose weights have one
/// length, as [`accumulate`] with 16-wide registers: each element still sums its positions
/// in order, each value row loaded once for all `Q`. Blocks of 64 elements (four registers
/// per output) across all positions, then the last 16–48 (the 48-wide heads of the 1.5B
/// layout) as one narrower block.
///
/// # Safety
/// AVX-512 F (every such CPU has F16C).
#[target_feature(enable = "avx512f,f16c")]
pub unsafe fn accumulate_512<const Q: usize, const F: bool, K: Kv>(
    mut o: [&mut [f32]; Q],
    w: [&[f32]; Q],
    values: &[K],
    stride: usize,
) {
    let (d, len) = (o[0].len(), w[0].len());
    assert!(d.is_multiple_of(L512) && o.iter().all(|o| o.len() == d) && w.iter().all(|w| w.len() == len));
    assert!(len == 0 || values.len() >= (len - 1) * stride + d);
    let whole = d / 64 * 64;
    for c in (0..whole).step_by(64) {
        block::<Q, 4, F, K>(&mut o, &w, values, stride, c);
    }
    match (d - whole) / L512 {
        1 => block::<Q, 1, F, K>(&mut o, &w, values, stride, whole),
        2 => block::<Q, 2, F, K>(&mut o, &w, values, stride, whole),
        3 => block::<Q, 3, F, K>(&mut o, &w, values, stride, whole),
        _ => {}
    }
}

/// Elements `c..c + 16·R` of every output, in `R` registers each across all positions.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)] // register tiles read best as indices
unsafe fn block<const Q: usize, const R: usize, const F: bool, K: Kv>(
    o: &mut [&mut [f32]; Q],
    w: &[&[f32]; Q],
    values: &[K],
    stride: usize,
    c: usize,
) {
    let mut acc: [[__m512; R]; Q] =
        core::array::from_fn(|i| core::array::from_fn(|k| _mm512_loadu_ps(o[i].as_ptr().add(c + 16 * k))));
    for p in 0..w[0].len() {
        prefetch(values, (p + super::AHEAD) * stride + c, 16 * R);
        let v = values.as_ptr().add(p * stride + c);
        let s: [__m512; Q] = core::array::from_fn(|i| _mm512_set1_ps(w[i][p]));
        for k in 0..R {
            let v = K::load16(v.add(16 * k));
            for i in 0..Q {
                acc[i][k] = madd512::<F>(acc[i][k], s[i], v);
            }
        }
    }
    for (o, acc) in o.iter_mut().zip(&acc) {
        for (k, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(o.as_mut_ptr().add(c + 16 * k), *acc);
        }
    }
}

/// `dot` for four rows at once: one row's chain of eight-lane adds waits on each add, four
/// chains overlap. Lane j of row r sums elements j, j + 8, … exactly as `dot` does.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4<const F: bool, K: Kv>(a: &[f32], b: [&[K]; 4]) -> [f32; 4] {
    let d = a.len();
    assert!(b.iter().all(|r| r.len() == d));
    let whole = d / 8 * 8;
    let mut l = [_mm256_setzero_ps(); 4];
    for t in (0..whole).step_by(8) {
        let ca = _mm256_loadu_ps(a.as_ptr().add(t));
        for r in 0..4 {
            let cb = K::load8(b[r].as_ptr().add(t));
            l[r] = madd256::<F>(l[r], ca, cb);
        }
    }
    let mut out = [0.0f32; 4];
    for r in 0..4 {
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), l[r]);
        for j in whole..d {
            lanes[j % 8] += a[j] * b[r][j].get();
        }
        out[r] = super::tree(&lanes);
    }
    out
}

/// Queries per group of the AVX2 kernels for `left` queries still to go: four, two or one, so
/// that a group's `Q·R` sums (`R = 8 / Q` rows or registers each) fill eight registers.
fn group(left: usize) -> usize {
    match left {
        0 | 1 => 1,
        2 | 3 => 2,
        _ => 4,
    }
}

/// `dot` of `Q` queries with `R` rows (`Q·R = 8`), times `scale`: each sum's lane j adds
/// elements j, j + 8, … as `dot` does, each key chunk is loaded once for the group, and the
/// fixed tree runs on all eight sums side by side (the steps of [`super::tree`], as
/// [`tree8`] does). Sum `i·R + r` is query i against row r.
///
/// # Safety
/// AVX2, FMA and F16C; `a.len() == Q`, every query's length a multiple of 8, every row as long.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)] // register tiles read best as indices
unsafe fn dots<const Q: usize, const R: usize, const F: bool, K: Kv>(
    a: &[&[f32]],
    b: [&[K]; R],
    scale: f32,
) -> [f32; 8] {
    let d = a[0].len();
    assert!(Q * R == 8 && a.len() == Q && d.is_multiple_of(8));
    assert!(a.iter().all(|q| q.len() == d) && b.iter().all(|r| r.len() == d));
    let mut l = [_mm256_setzero_ps(); 8];
    for t in (0..d).step_by(8) {
        let k: [__m256; R] = core::array::from_fn(|r| K::load8(b[r].as_ptr().add(t)));
        for i in 0..Q {
            let x = _mm256_loadu_ps(a[i].as_ptr().add(t));
            for r in 0..R {
                l[i * R + r] = madd256::<F>(l[i * R + r], x, k[r]);
            }
        }
    }
    // `l_i + l_{i+4}` of sums s and s + 4 side by side: [s: 4 values | s + 4: 4 values].
    let half = |x: __m256, y: __m256| {
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(x, y), _mm256_permute2f128_ps::<0x31>(x, y))
    };
    let h: [__m256; 4] = core::array::from_fn(|s| half(l[s], l[s + 4]));
    // Per 128-bit half: (l0+l4) + (l2+l6) and (l1+l5) + (l3+l7) of two sums each.
    let pair = |x: __m256, y: __m256| _mm256_add_ps(_mm256_shuffle_ps::<0x44>(x, y), _mm256_shuffle_ps::<0xEE>(x, y));
    let (t01, t23) = (pair(h[0], h[1]), pair(h[2], h[3]));
    // The last addition: [s0, s1, s2, s3 | s4, s5, s6, s7].
    let s = _mm256_add_ps(_mm256_shuffle_ps::<0x88>(t01, t23), _mm256_shuffle_ps::<0xDD>(t01, t23));
    let mut out = [0.0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(s, _mm256_set1_ps(scale)));
    out
}

/// The scores of several queries on AVX2, in groups ([`group`]) over the positions every
/// query of the group has; `first[i]` gets how many positions query i got (the caller does
/// the rest). A group loads each key row once for all its queries: one head's keys are larger
/// than L1, so they come from L2 once per group rather than once per query.
///
/// # Safety
/// AVX2, FMA and F16C; every query as long, a multiple of 8; `out` and `first` one per query.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores_groups<const F: bool, K: Kv>(
    q: &[&[f32]],
    keys: &[K],
    stride: usize,
    scale: f32,
    out: &mut [&mut [f32]],
    first: &mut [usize],
) {
    assert!(out.len() == q.len() && first.len() == q.len());
    let d = q.first().map_or(0, |q| q.len());
    let mut i = 0;
    while i < q.len() {
        let n = group(q.len() - i);
        let rows = 8 / n;
        let common = out[i..i + n].iter().map(|o| o.len()).min().unwrap_or(0) / rows * rows;
        for p in (0..common).step_by(rows) {
            prefetch(keys, (p + super::AHEAD) * stride, rows * stride);
            let qs = &q[i..i + n];
            let s = match n {
                1 => dots::<1, 8, F, K>(qs, core::array::from_fn(|r| &keys[(p + r) * stride..][..d]), scale),
                2 => dots::<2, 4, F, K>(qs, core::array::from_fn(|r| &keys[(p + r) * stride..][..d]), scale),
                _ => dots::<4, 2, F, K>(qs, core::array::from_fn(|r| &keys[(p + r) * stride..][..d]), scale),
            };
            for (o, s) in out[i..i + n].iter_mut().zip(s.chunks_exact(rows)) {
                o[p..p + rows].copy_from_slice(s);
            }
        }
        first[i..i + n].fill(common);
        i += n;
    }
}

/// `accumulate` of several queries on AVX2, every output a multiple of 8 long and every weight
/// row as long: in groups ([`group`]), blocks of `8·R` elements in `Q·R = 8` registers across
/// all positions (eight independent chains, enough for both FMA ports; each value chunk loaded
/// once for the group), then the last few registers' worth. Each element adds its positions
/// in order.
///
/// # Safety
/// AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_groups<const F: bool, K: Kv>(o: &mut [&mut [f32]], w: &[&[f32]], values: &[K], stride: usize) {
    let (d, len) = (o.first().map_or(0, |o| o.len()), w.first().map_or(0, |w| w.len()));
    assert!(o.len() == w.len() && d.is_multiple_of(8) && o.iter().all(|o| o.len() == d));
    assert!(w.iter().all(|w| w.len() == len) && (len == 0 || values.len() >= (len - 1) * stride + d));
    let mut i = 0;
    while i < o.len() {
        let n = group(o.len() - i);
        let (o, w) = (&mut o[i..i + n], &w[i..i + n]);
        let width = 64 / n;
        let whole = d / width * width;
        for c in (0..whole).step_by(width) {
            match n {
                1 => block_q::<1, 8, F, K>(o, w, values, stride, c),
                2 => block_q::<2, 4, F, K>(o, w, values, stride, c),
                _ => block_q::<4, 2, F, K>(o, w, values, stride, c),
            }
        }
        match (n, (d - whole) / 8) {
            (_, 0) => {}
            (1, 1) => block_q::<1, 1, F, K>(o, w, values, stride, whole),
            (1, 2) => block_q::<1, 2, F, K>(o, w, values, stride, whole),
            (1, 3) => block_q::<1, 3, F, K>(o, w, values, stride, whole),
            (1, 4) => block_q::<1, 4, F, K>(o, w, values, stride, whole),
            (1, 5) => block_q::<1, 5, F, K>(o, w, values, stride, whole),
            (1, 6) => block_q::<1, 6, F, K>(o, w, values, stride, whole),
            (1, _) => block_q::<1, 7, F, K>(o, w, values, stride, whole),
            (2, 1) => block_q::<2, 1, F, K>(o, w, values, stride, whole),
            (2, 2) => block_q::<2, 2, F, K>(o, w, values, stride, whole),
            (2, _) => block_q::<2, 3, F, K>(o, w, values, stride, whole),
            _ => block_q::<4, 1, F, K>(o, w, values, stride, whole),
        }
        i += n;
    }
}

/// Elements `c..c + 8·R` of each of the `Q` outputs, in `Q·R` registers across all positions.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::needless_range_loop)] // register tiles read best as indices
unsafe fn block_q<const Q: usize, const R: usize, const F: bool, K: Kv>(
    o: &mut [&mut [f32]],
    w: &[&[f32]],
    values: &[K],
    stride: usize,
    c: usize,
) {
    assert!(o.len() == Q && w.len() == Q && o.iter().all(|o| o.len() >= c + 8 * R));
    let mut acc: [[__m256; R]; Q] =
        core::array::from_fn(|i| core::array::from_fn(|k| _mm256_loadu_ps(o[i].as_ptr().add(c + 8 * k))));
    for p in 0..w[0].len() {
        prefetch(values, (p + super::AHEAD) * stride + c, 8 * R);
        let v = values.as_ptr().add(p * stride + c);
        let s: [__m256; Q] = core::array::from_fn(|i| _mm256_set1_ps(w[i][p]));
        for k in 0..R {
            let v = K::load8(v.add(8 * k));
            for i in 0..Q {
                acc[i][k] = madd256::<F>(acc[i][k], s[i], v);
            }
        }
    }
    for (o, acc) in o.iter_mut().zip(&acc) {
        for (k, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.as_mut_ptr().add(c + 8 * k), *acc);
        }
    }
}
