//! The inner loops of attention for one head and one query row: the scores `q·k_p`, `exp` for
//! the softmax, and `Σ_p w_p·v_p`. Each sums in one fixed order on every target (so scalar,
//! SIMD, wasm and any thread count give the same bits); the AVX forms keep that order and only
//! change which sums run side by side.
//!
//! Where every factor is an F16 value (the forward pass rounds queries, cached keys and values,
//! and the softmax weights to F16, as ggml does), each product has at most 22 significant bits
//! and an exponent far inside f32's range, so it is exact in f32: a fused multiply-add then
//! rounds only where the add alone rounded, and gives the bits of a multiply and an add with
//! half the instructions ([`Products::Exact`]).

/// What the caller promises about the products of the sums (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    /// Both factors of every product are F16 values: fused multiply-adds give the same bits.
    Exact,
    /// Any f32 values: multiply, round, then add.
    Rounded,
}

/// `q·k_p·scale` for every position `p < out.len()`; row `p` of `keys` starts at `p * stride`.
/// (The forward pass calls [`scores_many`], one query being `Q = 1`.)
#[cfg(test)]
pub fn scores(q: &[f32], keys: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    scores_many([q], keys, stride, scale, [out], Products::Rounded);
}

/// [`scores`] without the AVX-512 form: eight rows at a time on AVX2 (four where the query is
/// not a whole number of registers), else one by one.
#[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))] // `products`: x86 fuses
fn scores_rest(q: &[f32], keys: &[f32], stride: usize, scale: f32, out: &mut [f32], products: Products) {
    let row = |p: usize| &keys[p * stride..][..q.len()];
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if x86::avx2() {
        let mut eights = [0];
        if q.len().is_multiple_of(8) {
            let (q, out) = (&[q][..], &mut [&mut *out][..]);
            // SAFETY: the CPU has AVX2 and FMA (checked just above); the query's length is a
            // multiple of 8.
            unsafe {
                match products {
                    Products::Exact => x86::scores_groups::<true>(q, keys, stride, scale, out, &mut eights),
                    Products::Rounded => x86::scores_groups::<false>(q, keys, stride, scale, out, &mut eights),
                }
            }
        }
        let eights = eights[0];
        let whole = eights + (out.len() - eights) / 4 * 4;
        for p in (eights..whole).step_by(4) {
            let rows = [row(p), row(p + 1), row(p + 2), row(p + 3)];
            // SAFETY: the CPU has AVX2 and FMA (checked just above); the rows are `q.len()` long.
            let s = unsafe {
                match products {
                    Products::Exact => x86::dot4::<true>(q, rows),
                    Products::Rounded => x86::dot4::<false>(q, rows),
                }
            };
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
    accumulate_many([o], [w], values, stride, Products::Rounded);
}

/// [`accumulate`] without the AVX-512 form: register blocks on AVX2, the rest element-wise.
#[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))] // `products`: x86 fuses
fn accumulate_rest(o: &mut [f32], w: &[f32], values: &[f32], stride: usize, products: Products) {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let whole = if x86::avx2() {
        let whole = o.len() / 8 * 8;
        let (o, w) = (&mut [&mut o[..whole]][..], &[w][..]);
        // SAFETY: the CPU has AVX2 and FMA (checked just above); the output is a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::accumulate_groups::<true>(o, w, values, stride),
                Products::Rounded => x86::accumulate_groups::<false>(o, w, values, stride),
            }
        };
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
/// keys, `out[t]` for query t: on AVX-512 and AVX2, each key is loaded once for all of them (in
/// groups on AVX2) and more sums run side by side. Every score is still its own [`dot`], so
/// the bits are those of `Q` `scores` calls.
pub fn scores_many<const Q: usize>(
    q: [&[f32]; Q],
    keys: &[f32],
    stride: usize,
    scale: f32,
    out: [&mut [f32]; Q],
    products: Products,
) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut out, mut first) = (out, [0; Q]);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let whole = q[0].len().is_multiple_of(8) && q.iter().all(|x| x.len() == q[0].len());
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if whole && x86::avx512() {
        let d = q[0].len();
        let common = out.iter().map(|o| o.len()).min().unwrap_or(0) / 8 * 8;
        first = [common; Q];
        for p in (0..common).step_by(8) {
            let rows = core::array::from_fn(|r| &keys[(p + r) * stride..][..d]);
            // SAFETY: AVX-512 F/DQ were detected; the rows are `d` long, a multiple of 8.
            let s = unsafe {
                match products {
                    Products::Exact => x86::dot8_512::<Q, true>(q, rows),
                    Products::Rounded => x86::dot8_512::<Q, false>(q, rows),
                }
            };
            for (out, s) in out.iter_mut().zip(s) {
                for (o, s) in out[p..p + 8].iter_mut().zip(s) {
                    *o = s * scale;
                }
            }
        }
    } else if whole && x86::avx2() {
        let mut parts = out.each_mut().map(|o| &mut **o);
        // SAFETY: AVX2 and FMA were detected; the queries are one length, a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::scores_groups::<true>(&q, keys, stride, scale, &mut parts, &mut first),
                Products::Rounded => x86::scores_groups::<false>(&q, keys, stride, scale, &mut parts, &mut first),
            }
        }
    }
    for ((q, out), first) in q.into_iter().zip(out).zip(first) {
        scores_rest(q, keys.get(first * stride..).unwrap_or(&[]), stride, scale, &mut out[first..], products);
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

/// [`accumulate`] for `Q` queries of one head against the same values: on AVX-512 and AVX2, the
/// positions all of them weigh go through one pass that loads each value row once for all (in
/// groups on AVX2) and keeps more independent chains of additions, then each goes on alone. Every element still
/// adds its positions in order, so the bits are those of `Q` `accumulate` calls.
pub fn accumulate_many<const Q: usize>(
    o: [&mut [f32]; Q],
    w: [&[f32]; Q],
    values: &[f32],
    stride: usize,
    products: Products,
) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut o, mut done) = (o, 0);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let same = o.iter().all(|x| x.len() == o[0].len());
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if same && x86::avx512() && o[0].len().is_multiple_of(x86::L512) {
        done = w.iter().map(|w| w.len()).min().unwrap_or(0);
        let parts: [&mut [f32]; Q] = o.each_mut().map(|o| &mut **o);
        // SAFETY: AVX-512 F was detected; every output a whole number of register blocks.
        let w = w.map(|w| &w[..done]);
        unsafe {
            match products {
                Products::Exact => x86::accumulate_512::<Q, true>(parts, w, values, stride),
                Products::Rounded => x86::accumulate_512::<Q, false>(parts, w, values, stride),
            }
        };
    } else if same && x86::avx2() && o[0].len().is_multiple_of(8) {
        done = w.iter().map(|w| w.len()).min().unwrap_or(0);
        let mut parts = o.each_mut().map(|o| &mut **o);
        let w = w.map(|w| &w[..done]);
        // SAFETY: AVX2 and FMA were detected; the outputs are one length, a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::accumulate_groups::<true>(&mut parts, &w, values, stride),
                Products::Rounded => x86::accumulate_groups::<false>(&mut parts, &w, values, stride),
            }
        };
    }
    for (o, w) in o.iter_mut().zip(w) {
        accumulate_rest(o, &w[done..], values.get(done * stride..).unwrap_or(&[]), stride, products);
    }
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod x86;

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

    /// Every value rounded to F16, as the forward pass rounds what attention multiplies.
    fn halves(v: alloc::vec::Vec<f32>) -> alloc::vec::Vec<f32> {
        v.into_iter().map(|x| crate::gguf::f16_to_f32(crate::gguf::f32_to_f16(x))).collect()
    }

    /// Two or four queries at once (with weights of equal or unequal lengths) give what single
    /// calls give, bit for bit: scores, softmax and weighted sums. With `Products::Exact` (the
    /// fused multiply-adds) on F16 values, what the single unfused calls give.
    #[test]
    fn the_blocked_scores_and_sums_of_several_queries_equal_single_calls_bit_for_bit() {
        for products in [super::Products::Rounded, super::Products::Exact] {
            several_queries_equal_single_calls(products);
        }
    }

    fn several_queries_equal_single_calls(products: super::Products) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<alloc::vec::Vec<_>>();
        // The fused path is promised F16 factors; the unfused one takes any.
        let exact = products == super::Products::Exact;
        let values = |n: usize, seed: u32| if exact { halves(values(n, seed)) } else { values(n, seed) };
        let round = |w: &mut [f32]| {
            if exact {
                w.iter_mut().for_each(|x| *x = crate::gguf::f16_to_f32(crate::gguf::f32_to_f16(*x)))
            }
        };
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
                super::scores_many([&q[0], &q[1]], &keys, stride, 0.125, [&mut a, &mut b], products);
                let (mut wa, mut wb) = (alloc::vec![0.0; la], alloc::vec![0.0; lb]);
                super::scores(&q[0], &keys, stride, 0.125, &mut wa);
                super::scores(&q[1], &keys, stride, 0.125, &mut wb);
                assert_eq!((bits(&a), bits(&b)), (bits(&wa), bits(&wb)), "scores d {d}, {la} and {lb} positions");
                super::softmax_many([&mut a, &mut b]);
                super::softmax_many([&mut wa]);
                super::softmax_many([&mut wb]);
                assert_eq!((bits(&a), bits(&b)), (bits(&wa), bits(&wb)), "softmax d {d}, {la} and {lb} positions");
                round(&mut wa);
                round(&mut wb);
                let start = [values(d, 5), values(d, 6)];
                let (mut oa, mut ob) = (start[0].clone(), start[1].clone());
                super::accumulate_many([&mut oa, &mut ob], [&wa, &wb], &keys, stride, products);
                let (mut ea, mut eb) = (start[0].clone(), start[1].clone());
                super::accumulate(&mut ea, &wa, &keys, stride);
                super::accumulate(&mut eb, &wb, &keys, stride);
                let what = alloc::format!("sums d {d}, {la} and {lb} positions, {products:?}");
                assert_eq!((bits(&oa), bits(&ob)), (bits(&ea), bits(&eb)), "{what}");
            }
            // Four at once, the shortest not first (as attention's groups never are, but may be).
            let qs: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| values(d, 20 + t as u32));
            let lens = [rows, rows - 1, rows, 1];
            let mut got: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| alloc::vec![0.0; lens[t]]);
            super::scores_many(
                qs.each_ref().map(|q| &q[..]),
                &keys,
                stride,
                0.5,
                got.each_mut().map(|w| &mut w[..]),
                products,
            );
            super::softmax_many(got.each_mut().map(|w| &mut w[..]));
            got.iter_mut().for_each(|w| round(w));
            let mut outs: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| values(d, 30 + t as u32));
            let ws = got.each_ref().map(|w| &w[..]);
            super::accumulate_many(outs.each_mut().map(|o| &mut o[..]), ws, &keys, stride, products);
            for t in 0..4 {
                let mut w = alloc::vec![0.0; lens[t]];
                super::scores(&qs[t], &keys, stride, 0.5, &mut w);
                super::softmax_many([&mut w]);
                round(&mut w);
                let mut o = values(d, 30 + t as u32);
                super::accumulate(&mut o, &w, &keys, stride);
                let what = alloc::format!("four at once, d {d}, query {t}, {products:?}");
                assert_eq!((bits(&got[t]), bits(&outs[t])), (bits(&w), bits(&o)), "{what}");
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
