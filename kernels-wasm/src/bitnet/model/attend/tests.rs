//! Attention's kernels against their plain definitions, bit for bit.

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

#[test]
fn every_half_widens_as_gguf_widens_it() {
    use super::Kv;
    for h in 0..=u16::MAX {
        let (got, want) = (h.get(), crate::gguf::f16_to_f32(h));
        assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
    }
}

/// An F16 cache (the halves' bits) against an f32 one holding the same values: scores and
/// weighted sums of one, two and four queries, on every path this CPU has, bit for bit.
#[test]
fn the_blocked_scores_and_sums_read_an_f16_cache_as_its_f32_values() {
    use crate::gguf::f32_to_f16;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<alloc::vec::Vec<_>>();
    let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(64, 9, 72), (48, 3, 48)]
    } else {
        &[(64, 37, 64), (96, 70, 1536), (19, 6, 25), (128, 16, 136), (8, 2, 8), (48, 11, 96), (112, 5, 112)]
    };
    for products in [super::Products::Rounded, super::Products::Exact] {
        for &(d, rows, stride) in shapes {
            let keys = halves(values(rows * stride, 7));
            let k16: alloc::vec::Vec<u16> = keys.iter().map(|&x| f32_to_f16(x)).collect();
            let qs: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| halves(values(d, 40 + t as u32)));
            let lens = [rows, rows - 1, rows, 1];
            let what = alloc::format!("d {d}, {rows} rows, {products:?}");
            // Four queries at once, then one alone.
            let mut w32: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| alloc::vec![0.0; lens[t]]);
            let mut w16 = w32.clone();
            let q = qs.each_ref().map(|q| &q[..]);
            super::scores_many(q, &keys, stride, 0.25, w32.each_mut().map(|w| &mut w[..]), products);
            super::scores_many(q, &k16, stride, 0.25, w16.each_mut().map(|w| &mut w[..]), products);
            assert_eq!(w32.each_ref().map(|w| bits(w)), w16.each_ref().map(|w| bits(w)), "scores, {what}");
            let (mut one32, mut one16) = (alloc::vec![0.0; rows], alloc::vec![0.0; rows]);
            super::scores_many([&qs[0][..]], &keys, stride, 0.25, [&mut one32[..]], products);
            super::scores_many([&qs[0][..]], &k16, stride, 0.25, [&mut one16[..]], products);
            assert_eq!(bits(&one32), bits(&one16), "one query's scores, {what}");
            for w in w32.iter_mut() {
                super::softmax_many([&mut w[..]]);
                *w = halves(core::mem::take(w));
            }
            let ws = w32.each_ref().map(|w| &w[..]);
            let mut o32: [alloc::vec::Vec<f32>; 4] = core::array::from_fn(|t| values(d, 50 + t as u32));
            let mut o16 = o32.clone();
            super::accumulate_many(o32.each_mut().map(|o| &mut o[..]), ws, &keys, stride, products);
            super::accumulate_many(o16.each_mut().map(|o| &mut o[..]), ws, &k16, stride, products);
            assert_eq!(o32.each_ref().map(|o| bits(o)), o16.each_ref().map(|o| bits(o)), "sums, {what}");
            let (mut a, mut b) = (values(d, 60), values(d, 60));
            super::accumulate_many([&mut a[..]], [ws[0]], &keys, stride, products);
            super::accumulate_many([&mut b[..]], [ws[0]], &k16, stride, products);
            assert_eq!(bits(&a), bits(&b), "one query's sums, {what}");
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
    let shapes =
        [(64, 37, 64), (64, 9, 192), (80, 5, 80), (19, 6, 25), (32, 1, 32), (128, 7, 136), (48, 11, 96), (112, 4, 112)];
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
