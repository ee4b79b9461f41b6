//! Each operator against its f64 meaning (accuracy) and against the definitions in FACTS §1
//! (exact cases). Bit-exactness against the BPF programs is tested by native-host.

use super::*;
use crate::bitnet::random::Rng;
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn q16(v: f64) -> i32 {
    to_fixed(v, Q_ACT, 0).unwrap()
}

fn f(v: i64, bits: u32) -> f64 {
    v as f64 / (1u64 << bits) as f64
}

#[test]
fn conversion_rounds_half_away_and_refuses_what_does_not_fit() {
    assert_eq!(to_fixed(0.5 / 65536.0, 16, 0), Ok(1));
    assert_eq!(to_fixed(-0.5 / 65536.0, 16, 0), Ok(-1));
    assert_eq!(to_fixed(1.25 / 65536.0, 16, 0), Ok(1));
    // Just below a half: C's round() gives 0 (the +0.5-then-floor trick would give 1).
    assert_eq!(to_fixed(0.49999999999999994, 0, 0), Ok(0));
    assert_eq!(to_fixed(2.5, 0, 0), Ok(3));
    assert_eq!(to_fixed(-2.5, 0, 0), Ok(-3));
    assert_eq!(to_fixed(-1.0, 24, 0), Ok(-(1 << 24)));
    assert!(to_fixed(128.0, 24, 3).is_err()); // 2^31 does not fit
    assert_eq!(to_fixed(-128.0, 24, 0), Ok(i32::MIN));
    let err = tensor_to_fixed(&[0.0, f32::NAN], 24).unwrap_err();
    assert_eq!(err.index, 1);
    assert!(alloc::format!("{err}").contains("index 1"));
}

#[test]
fn matvec_floors_and_keeps_the_first_maximum() {
    // 1.5 · 1.0 + (−0.25) · 2.0 = 1.0 in Q16; a tie between rows 1 and 2 picks row 1.
    let x = [q16(1.5), q16(-0.25)];
    let w: Vec<i32> = [0.5, 0.0, 1.0, 2.0, 1.0, 2.0].iter().map(|&v| to_fixed(v, Q_W, 0).unwrap()).collect();
    let mut y = [0; 3];
    assert_eq!(matvec(&w, &x, &mut y), 1);
    assert_eq!(y, [q16(0.75), q16(1.0), q16(1.0)]);
    // Floor, not truncation: −1 · 1 (in the last place) >> 24 is −1.
    assert_eq!(dot_row(&[-1], &[1]), -1);
}

#[test]
fn isqrt_is_within_one_of_the_true_root() {
    let mut rng = Rng::new(1);
    for _ in 0..2000 {
        // RMSNorm's mean squares: up to (2^31)^2 / 1 in Q32, usually far less.
        let v = rng.next_u64() >> (rng.next_u64() % 40 + 2);
        let r = isqrt(v) as f64;
        let truth = (v as f64).sqrt();
        assert!((r - truth).abs() <= 1.0 + truth * 1e-9, "isqrt({v}) = {r}, √ = {truth}");
    }
}

#[test]
fn rms_norm_matches_f64() {
    let mut rng = Rng::new(2);
    for (n, eps) in [(8, 1e-6), (128, 1e-6), (1024, 1e-6), (576, 1e-5)] {
        let xf = rng.f32s(n, 3.0);
        let wf: Vec<f32> = rng.f32s(n, 1.0).iter().map(|v| v + 1.0).collect();
        let x: Vec<i32> = xf.iter().map(|&v| q16(v as f64)).collect();
        let w = tensor_to_fixed(&wf, Q_NORM).unwrap();
        let mut y = vec![0; n];
        rms_norm(&x, &w, eps_q32(eps), &mut y);
        let ms: f64 = xf.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n as f64;
        for i in 0..n {
            let expect = xf[i] as f64 / (ms + eps).sqrt() * wf[i] as f64;
            assert!((f(y[i] as i64, 16) - expect).abs() < 0.005, "n={n} i={i}");
        }
    }
}

#[test]
fn exp_and_silu_match_f64() {
    assert_eq!(exp_neg(0), 1 << 32);
    assert_eq!(exp_neg(16 << 16), 0);
    for i in 0..4000 {
        let d = i * 262; // 0 .. 16.0 in Q16
        let e = f(exp_neg(d) as i64, 32);
        let truth = (-f(d, 16)).exp();
        // (1 − d/1024)^1024 undershoots e^−d by a factor e^(−d²/2048) at most (d < 16: ≤ 12 %);
        // the ten floored squarings lose a few units of 2^−32 more, which matters only near 0.
        let lower = truth * (-(f(d, 16).powi(2)) / 2048.0).exp() * 0.999 - 1e-7;
        assert!(e <= truth + 1e-9 && e >= lower, "d={d}: {e} vs {truth}");
    }
    assert_eq!(silu(20 << 16), 20 << 16);
    assert_eq!(silu(-(20 << 16)), 0);
    for i in -3000..3000 {
        let x = i * 349; // −16 .. 16
        let xf = f(x as i64, 16);
        let truth = xf / (1.0 + (-xf).exp());
        assert!((f(silu(x) as i64, 16) - truth).abs() < 0.02, "x={xf}");
    }
}

#[test]
fn rope_rotates_pairs_half_a_head_apart() {
    let mut head: Vec<i32> = (0..8).map(|i| q16(i as f64 - 3.0)).collect();
    let angle = [0.3f64, 1.1, -2.0, 0.0];
    let cos: Vec<i32> = angle.iter().map(|a| to_fixed(a.cos(), Q_NORM, 0).unwrap()).collect();
    let sin: Vec<i32> = angle.iter().map(|a| to_fixed(a.sin(), Q_NORM, 0).unwrap()).collect();
    let before: Vec<f64> = head.iter().map(|&v| f(v as i64, 16)).collect();
    rope(&mut head, &cos, &sin);
    for i in 0..4 {
        let (a, b, t) = (before[i], before[i + 4], angle[i]);
        assert!((f(head[i] as i64, 16) - (a * t.cos() - b * t.sin())).abs() < 1e-4);
        assert!((f(head[i + 4] as i64, 16) - (b * t.cos() + a * t.sin())).abs() < 1e-4);
    }
}

#[test]
fn online_softmax_is_the_softmax_weighted_mean() {
    let mut rng = Rng::new(3);
    for positions in [1, 2, 7, 64] {
        let dim = 16;
        let scores: Vec<f64> = rng.f32s(positions, 4.0).iter().map(|&v| v as f64).collect();
        let values: Vec<Vec<f32>> = (0..positions).map(|_| rng.f32s(dim, 2.0)).collect();
        let mut sm = OnlineSoftmax::new(dim);
        for (s, v) in scores.iter().zip(&values) {
            let vq: Vec<i32> = v.iter().map(|&x| q16(x as f64)).collect();
            sm.push(q16(*s), &vq);
        }
        let max = scores.iter().cloned().fold(f64::MIN, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for d in 0..dim {
            let expect: f64 = weights.iter().zip(&values).map(|(w, v)| w * v[d] as f64).sum::<f64>() / total;
            // The integer exp undershoots (see above) and each update floors: a few percent of
            // the value range.
            assert!((f(sm.out[d] as i64, 16) - expect).abs() < 0.1, "{positions} positions, dim {d}");
        }
    }
    // A single position is its own value, exactly.
    let mut one = OnlineSoftmax::new(2);
    one.push(q16(0.5), &[7, -9]);
    assert_eq!(one.out, [7, -9]);
}

#[test]
fn scores_scale_by_one_over_root_head_dim() {
    // The seed's constants fall out of the general formulas.
    assert_eq!(score_scale_q16(128), INV_SQRT_128_Q16);
    assert_eq!(eps_q32(1e-6), EPS_Q32);
    for dim in [64, 80, 96, 128] {
        let scale = score_scale_q16(dim);
        assert_eq!(scale, (65536.0 / (dim as f64).sqrt()).round() as i64, "head_dim {dim}");
        let q = vec![q16(1.0); dim];
        let k = vec![q16(0.5); dim];
        // Σ q·k = dim / 2 → (dim / 2) / √dim.
        let want = dim as f64 / 2.0 / (dim as f64).sqrt();
        assert!((f(score(&q, &k, scale) as i64, 16) - want).abs() < 1e-3, "head_dim {dim}");
    }
}
