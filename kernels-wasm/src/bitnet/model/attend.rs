//! The inner loops of attention for one head and one query row: the scores `q·k_p`, `exp` for
//! the softmax, and `Σ_p w_p·v_p`. Each sums in one fixed order on every target (so scalar,
//! SIMD, wasm and any thread count give the same bits); the AVX forms keep that order and only
//! change which sums run side by side.

/// `q·k_p·scale` for every position `p < out.len()`; row `p` of `keys` starts at `p * stride`.
/// (The forward pass calls [`scores_many`], one query being `Q = 1`.)
#[cfg(test)]
pub fn scores(q: &[f32], keys: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    scores_many([q], keys, stride, scale, [out]);
}

/// [`scores`] without the AVX-512 form: four rows at a time on AVX2, else one by one.
fn scores_rest(q: &[f32], keys: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    let row = |p: usize| &keys[p * stride..][..q.len()];
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if std::is_x86_feature_detected!("avx2") {
        let whole = out.len() / 4 * 4;
        for p in (0..whole).step_by(4) {
            // SAFETY: the CPU has AVX (checked just above); the rows are `q.len()` long.
            let s = unsafe { x86::dot4(q, [row(p), row(p + 1), row(p + 2), row(p + 3)]) };
            for (o, s) in out[p..p + 4].iter_mut().zip(s) {
                *o = s * scale;
            }
        }
        for (p, o) in out.iter_mut().enumerate().skip(whole) {
            *o = dot(q, row(p)) * scale;
        }
        return;
    }
    for (p, o) in out.iter_mut().enumerate() {
        *o = dot(q, row(p)) * scale;
    }
}

/// The largest score, eight lanes at a time so the loop vectorises: a maximum is the same in
/// any order (where +0 and −0 tie, either gives the same `exp(s − max)`).
#[inline(always)]
pub fn max(w: &[f32]) -> f32 {
    let mut l = [f32::NEG_INFINITY; 8];
    let chunks = w.chunks_exact(8);
    for (j, &v) in chunks.remainder().iter().enumerate() {
        l[j] = l[j].max(v);
    }
    for c in chunks {
        for j in 0..8 {
            l[j] = l[j].max(c[j]);
        }
    }
    l.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `o[e] += Σ_p w[p]·v_p[e]`, each element summed in `p` order; row `p` of `values` starts at
/// `p * stride`.
#[cfg(test)]
pub fn accumulate(o: &mut [f32], w: &[f32], values: &[f32], stride: usize) {
    accumulate_many([o], [w], values, stride);
}

/// [`accumulate`] without the AVX-512 form: register blocks on AVX2, the rest element-wise.
fn accumulate_rest(o: &mut [f32], w: &[f32], values: &[f32], stride: usize) {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let whole = if std::is_x86_feature_detected!("avx2") {
        let whole = o.len() / x86::E * x86::E;
        // SAFETY: the CPU has AVX (checked just above).
        unsafe { x86::accumulate(&mut o[..whole], w, values, stride) };
        whole
    } else {
        0
    };
    #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
    let whole = 0;
    let d = o.len();
    for (p, &s) in w.iter().enumerate() {
        for (acc, v) in o[whole..].iter_mut().zip(&values[p * stride + whole..][..d - whole]) {
            *acc += s * v;
        }
    }
}

/// [`scores`] for `Q` queries of one head (neighbouring tokens of a prompt) against the same
/// keys, `out[t]` for query t: where AVX-512 runs, each key is loaded once for all of them and
/// `Q` times as many sums run side by side. Every score is still its own [`dot`], so the bits
/// are those of `Q` `scores` calls.
pub fn scores_many<const Q: usize>(q: [&[f32]; Q], keys: &[f32], stride: usize, scale: f32, out: [&mut [f32]; Q]) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut out, mut first) = (out, 0);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if x86::avx512() && q[0].len().is_multiple_of(8) && q.iter().all(|x| x.len() == q[0].len()) {
        let d = q[0].len();
        first = out.iter().map(|o| o.len()).min().unwrap_or(0) / 8 * 8;
        for p in (0..first).step_by(8) {
            let rows = core::array::from_fn(|r| &keys[(p + r) * stride..][..d]);
            // SAFETY: AVX-512 F/DQ were detected; the rows are `d` long, a multiple of 8.
            let s = unsafe { x86::dot8_512(q, rows) };
            for (out, s) in out.iter_mut().zip(s) {
                for (o, s) in out[p..p + 8].iter_mut().zip(s) {
                    *o = s * scale;
                }
            }
        }
    }
    for (q, out) in q.into_iter().zip(out) {
        scores_rest(q, keys.get(first * stride..).unwrap_or(&[]), stride, scale, &mut out[first..]);
    }
}

/// Scores to softmax weights in place, `Q` rows at once, as ggml's soft_max does each row:
/// `exp(s − max)`, their sum in f64 in position order, each weight times `1/sum` (rounded once
/// to f32). The rows' sums run side by side, so `Q` chains of dependent additions overlap
/// instead of running one after another; each row's bits are those it has alone.
pub fn softmax_many<const Q: usize>(mut w: [&mut [f32]; Q]) {
    for w in w.iter_mut() {
        exp_shifted(w);
    }
    let mut sum = [0.0f64; Q];
    let common = w.iter().map(|w| w.len()).min().unwrap_or(0);
    for p in 0..common {
        for (s, w) in sum.iter_mut().zip(w.iter()) {
            *s += w[p] as f64;
        }
    }
    for (s, w) in sum.iter_mut().zip(w.iter_mut()) {
        // The rest of a longer row, still one position after another.
        for &v in &w[common..] {
            *s += v as f64;
        }
        scale_by(w, (1.0 / *s) as f32);
    }
}

/// [`accumulate`] for `Q` queries of one head against the same values: where AVX-512 runs, the
/// positions all of them weigh go through one pass that loads each value row once for all (and
/// keeps `4·Q` independent chains of additions), then each goes on alone. Every element still
/// adds its positions in order, so the bits are those of `Q` `accumulate` calls.
pub fn accumulate_many<const Q: usize>(o: [&mut [f32]; Q], w: [&[f32]; Q], values: &[f32], stride: usize) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut o, mut done) = (o, 0);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if x86::avx512() && o[0].len().is_multiple_of(x86::L512) && o.iter().all(|x| x.len() == o[0].len()) {
        done = w.iter().map(|w| w.len()).min().unwrap_or(0);
        let parts: [&mut [f32]; Q] = o.each_mut().map(|o| &mut **o);
        // SAFETY: AVX-512 F was detected; every output a whole number of register blocks.
        unsafe { x86::accumulate_512(parts, w.map(|w| &w[..done]), values, stride) };
    }
    for (o, w) in o.iter_mut().zip(w) {
        accumulate_rest(o, &w[done..], values.get(done * stride..).unwrap_or(&[]), stride);
    }
}

/// The same sums with 8-wide registers (mul then add, never fused: the same roundings).
#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod x86 {
    use core::arch::x86_64::*;

    /// Whether the AVX-512 forms can run (F for the arithmetic, DQ for the 256-bit inserts).
    pub fn avx512() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
    }

    /// `dot` of each of `Q` queries with eight rows at once, two rows per 512-bit register (row
    /// r's eight lanes in one half): lane j of each row still sums elements j, j + 8, … in
    /// order, with the same query chunk in both halves; each key chunk is loaded once for all
    /// `Q` queries. The fixed tree then runs on all eight rows together: 128-bit halves added
    /// (`l_i + l_{i+4}`), then 64-bit halves, then the last pair, each step the same additions
    /// in the same order as [`super::tree`], only across rows side by side.
    ///
    /// # Safety
    /// AVX-512 F and DQ; every query's length a multiple of 8 and every row as long as it.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub unsafe fn dot8_512<const Q: usize>(a: [&[f32]; Q], b: [&[f32]; 8]) -> [[f32; 8]; Q] {
        let d = a[0].len();
        assert!(d.is_multiple_of(8) && a.iter().all(|q| q.len() == d) && b.iter().all(|r| r.len() == d));
        let mut acc = [[_mm512_setzero_ps(); 4]; Q];
        for t in (0..d).step_by(8) {
            let q: [__m512; Q] =
                core::array::from_fn(|i| _mm512_broadcast_f32x8(_mm256_loadu_ps(a[i].as_ptr().add(t))));
            for j in 0..4 {
                let lo = _mm512_castps256_ps512(_mm256_loadu_ps(b[2 * j].as_ptr().add(t)));
                let k = _mm512_insertf32x8::<1>(lo, _mm256_loadu_ps(b[2 * j + 1].as_ptr().add(t)));
                for i in 0..Q {
                    acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(q[i], k));
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
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn accumulate_512<const Q: usize>(
        mut o: [&mut [f32]; Q],
        w: [&[f32]; Q],
        values: &[f32],
        stride: usize,
    ) {
        let (d, len) = (o[0].len(), w[0].len());
        assert!(d.is_multiple_of(L512) && o.iter().all(|o| o.len() == d) && w.iter().all(|w| w.len() == len));
        assert!(len == 0 || values.len() >= (len - 1) * stride + d);
        let whole = d / 64 * 64;
        for c in (0..whole).step_by(64) {
            block::<Q, 4>(&mut o, &w, values, stride, c);
        }
        match (d - whole) / L512 {
            1 => block::<Q, 1>(&mut o, &w, values, stride, whole),
            2 => block::<Q, 2>(&mut o, &w, values, stride, whole),
            3 => block::<Q, 3>(&mut o, &w, values, stride, whole),
            _ => {}
        }
    }

    /// Elements `c..c + 16·K` of every output, in `K` registers each across all positions.
    #[target_feature(enable = "avx512f")]
    #[inline]
    #[allow(clippy::needless_range_loop)] // register tiles read best as indices
    unsafe fn block<const Q: usize, const K: usize>(
        o: &mut [&mut [f32]; Q],
        w: &[&[f32]; Q],
        values: &[f32],
        stride: usize,
        c: usize,
    ) {
        let mut acc: [[__m512; K]; Q] =
            core::array::from_fn(|i| core::array::from_fn(|k| _mm512_loadu_ps(o[i].as_ptr().add(c + 16 * k))));
        for p in 0..w[0].len() {
            let v = values.as_ptr().add(p * stride + c);
            let s: [__m512; Q] = core::array::from_fn(|i| _mm512_set1_ps(w[i][p]));
            for k in 0..K {
                let v = _mm512_loadu_ps(v.add(16 * k));
                for i in 0..Q {
                    acc[i][k] = _mm512_add_ps(acc[i][k], _mm512_mul_ps(s[i], v));
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
    #[target_feature(enable = "avx")]
    pub unsafe fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let d = a.len();
        assert!(b.iter().all(|r| r.len() == d));
        let whole = d / 8 * 8;
        let mut l = [_mm256_setzero_ps(); 4];
        for t in (0..whole).step_by(8) {
            let ca = _mm256_loadu_ps(a.as_ptr().add(t));
            for r in 0..4 {
                let cb = _mm256_loadu_ps(b[r].as_ptr().add(t));
                l[r] = _mm256_add_ps(l[r], _mm256_mul_ps(ca, cb));
            }
        }
        let mut out = [0.0f32; 4];
        for r in 0..4 {
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), l[r]);
            for j in whole..d {
                lanes[j % 8] += a[j] * b[r][j];
            }
            out[r] = super::tree(&lanes);
        }
        out
    }

    /// Elements a register block holds across all positions.
    pub const E: usize = 32;

    /// `accumulate` for `o.len()` a multiple of `E`: thirty-two elements stay in four registers
    /// across all positions, instead of `o` being loaded and stored once per position.
    #[target_feature(enable = "avx")]
    pub unsafe fn accumulate(o: &mut [f32], w: &[f32], values: &[f32], stride: usize) {
        assert!(o.len().is_multiple_of(E) && (w.is_empty() || values.len() >= (w.len() - 1) * stride + o.len()));
        for c in (0..o.len()).step_by(E) {
            let mut acc: [__m256; 4] = core::array::from_fn(|k| _mm256_loadu_ps(o.as_ptr().add(c + 8 * k)));
            for (p, &s) in w.iter().enumerate() {
                let (s, v) = (_mm256_set1_ps(s), values.as_ptr().add(p * stride + c));
                for (k, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(s, _mm256_loadu_ps(v.add(8 * k))));
                }
            }
            for (k, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(c + 8 * k), *acc);
            }
        }
    }
}

/// The fixed tree that ends [`dot`] (and the Q8_0 output layer's eight lanes): lane j holds
/// elements j, j + 8, ….
#[inline(always)]
pub(crate) fn tree(l: &[f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// `Σ a·b` in a fixed order: eight lanes (element j to lane j mod 8), then a fixed tree. The
/// compiler vectorises it, and every target sums alike.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut l = [0.0f32; 8];
    let whole = a.len() / 8 * 8;
    for (ca, cb) in a[..whole].chunks_exact(8).zip(b[..whole].chunks_exact(8)) {
        for j in 0..8 {
            l[j] += ca[j] * cb[j];
        }
    }
    for j in whole..a.len() {
        l[j % 8] += a[j] * b[j];
    }
    tree(&l)
}

/// `exp(x)` for the softmax, as Cephes' `expf` computes it (x = n·ln2 + r, a degree-6
/// polynomial in r, times 2ⁿ), within 2 ulp of the true value; only additions and
/// multiplications, so the loop over a row vectorises and every target gives the same bits.
pub fn expf(x: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    let x = x.clamp(-87.0, 88.0);
    // Round x·log2(e) to the nearest integer by pushing it through the mantissa; the sum's low
    // mantissa bits are that integer (read from the bits: an `as` conversion saturates, which
    // LLVM does lane by lane, and this loop should stay in vector registers).
    let t = x * LOG2E + 12_582_912.0;
    let (n, ni) = (t - 12_582_912.0, t.to_bits() as i32 - 0x4B40_0000);
    // ln 2 in two parts, so r = x − n·ln2 stays exact.
    let r = (x - n * 0.693_359_4) - n * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((ni + 127) as u32) << 23)
}

crate::bitnet::wide::wide_fn! {
    /// `s ← exp(s − max)`: the softmax's first step.
    fn exp_shifted(w: &mut [f32]) {
        let max = max(w);
        w.iter_mut().for_each(|s| *s = expf(*s - max));
    }
}

crate::bitnet::wide::wide_fn! {
    /// `s ← s·inv`: the softmax's last step.
    fn scale_by(w: &mut [f32], inv: f32) {
        w.iter_mut().for_each(|s| *s *= inv);
    }
}

crate::bitnet::wide::wide_fn! {
    /// `g = silu(g) · u` element by element: the FFN's gate (SiLU, with this `exp`) times its up
    /// projection.
    pub fn silu_mul(g: &mut [f32], u: &[f32]) {
        for (g, u) in g.iter_mut().zip(u) {
            *g = *g / (1.0 + expf(-*g)) * u;
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn the_softmax_exp_is_within_two_ulp_of_libm() {
        let mut worst = 0;
        for i in 0..=200_000 {
            let x = -87.0 + 97.0 * i as f32 / 200_000.0;
            let (got, want) = (super::expf(x), libm::expf(x));
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs();
            worst = worst.max(ulp);
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(super::expf(0.0), 1.0);
        assert_eq!(super::expf(-1000.0), super::expf(-87.0));
    }

    #[test]
    fn dot_sums_in_its_fixed_order() {
        let a: alloc::vec::Vec<f32> = (0..19).map(|i| 1.0 + i as f32 * 1e-3).collect();
        let b: alloc::vec::Vec<f32> = (0..19).map(|i| 3.0 - i as f32 * 7e-4).collect();
        let mut l = [0.0f32; 8];
        for j in 0..19 {
            l[j % 8] += a[j] * b[j];
        }
        let want = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        assert_eq!(super::dot(&a, &b).to_bits(), want.to_bits());
    }

    /// Values with every exponent and sign a score meets, from a fixed generator.
    fn values(n: usize, seed: u32) -> alloc::vec::Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as i32) as f32 * 2.0f32.powi((x % 7) as i32 - 34)
            })
            .collect()
    }

    #[test]
    fn the_blocked_scores_equal_one_dot_per_row_bit_for_bit() {
        for (d, rows, stride) in
            [(64, 37, 64), (64, 9, 192), (19, 6, 25), (5, 3, 5), (128, 4, 128), (8, 1, 8), (8, 17, 8), (128, 16, 136)]
        {
            let (q, keys) = (values(d, d as u32), values(rows * stride, 7));
            let mut got = alloc::vec![0.0; rows];
            super::scores(&q, &keys, stride, 0.125, &mut got);
            for (p, g) in got.iter().enumerate() {
                let want = super::dot(&q, &keys[p * stride..][..d]) * 0.125;
                assert_eq!(g.to_bits(), want.to_bits(), "d {d}, row {p}");
            }
        }
    }

    /// Two or four queries at once (with weights of equal or unequal lengths) give what single
    /// calls give, bit for bit: scores, softmax and weighted sums.
    #[test]
    fn the_blocked_scores_and_sums_of_several_queries_equal_single_calls_bit_for_bit() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<alloc::vec::Vec<_>>();
        // Miri interprets every vector instruction: two shapes there.
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(64, 9, 72), (48, 3, 48)]
        } else {
            &[(64, 37, 64), (64, 9, 192), (19, 6, 25), (128, 16, 136), (8, 2, 8), (48, 11, 96), (112, 5, 112)]
        };
        for &(d, rows, stride) in shapes {
            let keys = values(rows * stride, 7);
            let q = [values(d, 1), values(d, 2)];
            let lengths = [(rows - 1, rows), (rows, 1), (rows, rows), (1, rows)];
            for &(la, lb) in &lengths[..if cfg!(miri) { 2 } else { 4 }] {
                let (mut a, mut b) = (alloc::vec![0.0; la], alloc::vec![0.0; lb]);
                super::scores_many([&q[0], &q[1]], &keys, stride, 0.125, [&mut a, &mut b]);
                let (mut wa, mut wb) = (alloc::vec![0.0; la], alloc::vec![0.0; lb]);
                super::scores(&q[0], &keys, stride, 0.125, &mut wa);
                super::scores(&q[1], &keys, stride, 0.125, &mut wb);
                assert_eq!((bits(&a), bits(&b)), (bits(&wa), bits(&wb)), "scores d {d}, {la} and {lb} positions");
                super::softmax_many([&mut a, &mut b]);
                super::softmax_many([&mut wa]);
                super::softmax_many([&mut wb]);
                assert_eq!((bits(&a), bits(&b)), (bits(&wa), bits(&wb)), "softmax d {d}, {la} and {lb} positions");
                let start = [values(d, 5), values(d, 6)];
                let (mut oa, mut ob) = (start[0].clone(), start[1].clone());
                super::accumulate_many([&mut oa, &mut ob], [&wa, &wb], &keys, stride);
                let (mut ea, mut eb) = (start[0].clone(), start[1].clone());
                super::accumulate(&mut ea, &wa, &keys, stride);
                super::accumulate(&mut eb, &wb, &keys, stride);
                assert_eq!((bits(&oa), bits(&ob)), (bits(&ea), bits(&eb)), "sums d {d}, {la} and {lb} positions");
            }
            // Four at once, the shortest not first (as attention's groups never are, but may be).
            let qs: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| values(d, 20 + t as u32));
            let lens = [rows, rows - 1, rows, 1];
            let mut got: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| alloc::vec![0.0; lens[t]]);
            super::scores_many(qs.each_ref().map(|q| &q[..]), &keys, stride, 0.5, got.each_mut().map(|w| &mut w[..]));
            super::softmax_many(got.each_mut().map(|w| &mut w[..]));
            let mut outs: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| values(d, 30 + t as u32));
            let ws = got.each_ref().map(|w| &w[..]);
            super::accumulate_many(outs.each_mut().map(|o| &mut o[..]), ws, &keys, stride);
            for t in 0..4 {
                let mut w = alloc::vec![0.0; lens[t]];
                super::scores(&qs[t], &keys, stride, 0.5, &mut w);
                super::softmax_many([&mut w]);
                let mut o = values(d, 30 + t as u32);
                super::accumulate(&mut o, &w, &keys, stride);
                assert_eq!((bits(&got[t]), bits(&outs[t])), (bits(&w), bits(&o)), "four at once, d {d}, query {t}");
            }
        }
    }

    /// The widened softmax and SiLU loops against the same arithmetic written out here.
    #[test]
    fn the_softmax_and_silu_loops_compute_their_definitions_bit_for_bit() {
        for len in [1, 7, 16, 33, 300] {
            let x = values(len, 3 + len as u32);
            let mut got = x.clone();
            super::softmax_many([&mut got]);
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: alloc::vec::Vec<f32> = x.iter().map(|&s| super::expf(s - max)).collect();
            let inv = (1.0 / e.iter().map(|&v| v as f64).sum::<f64>()) as f32;
            let want: alloc::vec::Vec<u32> = e.iter().map(|&v| (v * inv).to_bits()).collect();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<alloc::vec::Vec<_>>(), want, "softmax {len}");
            let (mut g, u) = (values(len, 5).iter().map(|v| v * 1e9).collect::<alloc::vec::Vec<f32>>(), values(len, 6));
            let want: alloc::vec::Vec<u32> =
                g.iter().zip(&u).map(|(&g, &u)| (g / (1.0 + super::expf(-g)) * u).to_bits()).collect();
            super::silu_mul(&mut g, &u);
            assert_eq!(g.iter().map(|v| v.to_bits()).collect::<alloc::vec::Vec<_>>(), want, "silu {len}");
        }
    }

    #[test]
    fn the_lane_wise_maximum_is_the_maximum() {
        for len in [1, 7, 8, 13, 300] {
            let w = values(len, len as u32);
            assert_eq!(super::max(&w), w.iter().copied().fold(f32::NEG_INFINITY, f32::max), "{len}");
        }
        assert_eq!(super::max(&[-3.0, -1.0, -2.0]), -1.0);
    }

    #[test]
    fn the_blocked_weighted_sum_adds_in_position_order_bit_for_bit() {
        let shapes = [
            (64, 37, 64),
            (64, 9, 192),
            (80, 5, 80),
            (19, 6, 25),
            (32, 1, 32),
            (128, 7, 136),
            (48, 11, 96),
            (112, 4, 112),
        ];
        for (d, rows, stride) in shapes {
            let (w, vals) = (values(rows, 3), values(rows * stride, 11));
            let start = values(d, 5);
            let mut got = start.clone();
            super::accumulate(&mut got, &w, &vals, stride);
            let mut want = start;
            for (p, &s) in w.iter().enumerate() {
                for (acc, v) in want.iter_mut().zip(&vals[p * stride..][..d]) {
                    *acc += s * v;
                }
            }
            let (g, w): (alloc::vec::Vec<u32>, alloc::vec::Vec<u32>) =
                (got.iter().map(|x| x.to_bits()).collect(), want.iter().map(|x| x.to_bits()).collect());
            assert_eq!(g, w, "d {d}");
        }
    }
}
