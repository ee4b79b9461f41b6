//! Quantisation as BitNet b1.58 defines it.
//!
//! Weights (absmean): `beta = mean|w|` (at least 1e-5), `w' = round(w / beta)` clamped to
//! [-1, 1]. Activations (per tensor, i.e. per row of the activation matrix):
//! `s = 127 / max|x|`, `q = round(x * s)` clamped to [-128, 127].
//!
//! The rounding differs by path in bitnet.cpp: the LUT kernels round to nearest even
//! (NEON `vcvtnq`, the `nearest_int` trick), so [`Rounding::HalfEven`] is the default here.
//! No `std` float functions are used, so this also runs on microcontrollers.

use super::BitnetError;
use alloc::vec::Vec;

/// Weights smaller than this in mean magnitude would make `w / beta` blow up.
pub const MIN_WEIGHT_SCALE: f32 = 1e-5;
/// I2_S guards its activation maximum the same way.
pub const MIN_ACT_MAX: f32 = 1e-5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rounding {
    /// Ties to even: what `vcvtnq_s32_f32` and ggml's `nearest_int` do.
    #[default]
    HalfEven,
    /// Ties away from zero: C's `roundf`.
    HalfAway,
}

impl Rounding {
    /// Rounds `x` (|x| < 2^22, which every caller guarantees by clamping first) to an integer.
    #[inline(always)]
    pub fn round(self, x: f32) -> i32 {
        match self {
            // Adding 1.5·2^23 pushes the fraction out of the mantissa, so the FPU's own
            // round-to-nearest-even does the rounding, and the sum's low mantissa bits are the
            // integer (its exponent is 2^23's for |x| < 2^22). Reading the bits, rather than
            // converting with `as`, keeps the loop in vector registers: `as` saturates, which
            // LLVM does lane by lane.
            Rounding::HalfEven => (x + 12_582_912.0).to_bits() as i32 - 0x4B40_0000,
            Rounding::HalfAway => {
                let t = x as i32; // truncates toward zero
                let frac = x - t as f32; // exact for |x| < 2^23
                if frac >= 0.5 {
                    t + 1
                } else if frac <= -0.5 {
                    t - 1
                } else {
                    t
                }
            }
        }
    }
}

/// An M×K ternary weight matrix, row-major, with its absmean scale.
#[derive(Debug, Clone, PartialEq)]
pub struct TernaryMatrix {
    pub rows: usize,
    pub cols: usize,
    /// Row-major, each in {-1, 0, 1}.
    pub w: Vec<i8>,
    pub scale: f32,
}

impl TernaryMatrix {
    /// Wraps already-ternary weights, checking every value.
    pub fn new(rows: usize, cols: usize, w: Vec<i8>, scale: f32) -> Result<Self, BitnetError> {
        check_len("ternary weights", rows * cols, w.len())?;
        if let Some((index, &value)) = w.iter().enumerate().find(|(_, v)| !(-1..=1).contains(*v)) {
            return Err(BitnetError::NotTernary { index, value });
        }
        if !scale.is_finite() {
            return Err(BitnetError::NonFinite { what: "weight scale", index: 0 });
        }
        Ok(TernaryMatrix { rows, cols, w, scale })
    }

    /// Absmean quantisation of f32 weights.
    pub fn quantize(rows: usize, cols: usize, w: &[f32]) -> Result<Self, BitnetError> {
        check_len("f32 weights", rows * cols, w.len())?;
        check_finite("f32 weights", w)?;
        // Summed in f64 so the mean of millions of weights does not drift with the order.
        let sum: f64 = w.iter().map(|v| v.abs() as f64).sum();
        let beta = ((sum / w.len().max(1) as f64) as f32).max(MIN_WEIGHT_SCALE);
        let q = w.iter().map(|&v| Rounding::HalfEven.round((v / beta).clamp(-1.5, 1.5)).clamp(-1, 1) as i8).collect();
        Ok(TernaryMatrix { rows, cols, w: q, scale: beta })
    }

    pub fn row(&self, r: usize) -> &[i8] {
        &self.w[r * self.cols..(r + 1) * self.cols]
    }
}

/// One activation row quantised to int8 with its scale.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantActs {
    pub q: Vec<i8>,
    /// `127 / max|x|`: divide by it to get back to f32.
    pub scale: f32,
}

crate::bitnet::wide::wide_fn! {
    /// `per_tensor_quant`: `s = 127 / max(max|x|, MIN_ACT_MAX)`, `q = round(x * s)`.
    pub fn quantize_activations(x: &[f32], rounding: Rounding) -> Result<QuantActs, BitnetError> {
        // One pass for both: v·0 is NaN exactly for NaN and ±inf, and a NaN sum flags them all.
        // Sixteen lanes each, so the loop vectorises: a maximum is exact in any order, and a NaN
        // in any lane's sum survives the final sum. (`a > m` rather than `f32::max`, which
        // compiles to NaN-handling scalar code; a NaN is caught by the sum instead.)
        const L: usize = 16;
        let (mut m, mut p) = ([0.0f32; L], [0.0f32; L]);
        let chunks = x.chunks_exact(L);
        for (j, &v) in chunks.remainder().iter().enumerate() {
            (m[j], p[j]) = (if v.abs() > m[j] { v.abs() } else { m[j] }, p[j] + v * 0.0);
        }
        for c in chunks {
            for j in 0..L {
                (m[j], p[j]) = (if c[j].abs() > m[j] { c[j].abs() } else { m[j] }, p[j] + c[j] * 0.0);
            }
        }
        let (max, poison) = (m.iter().fold(0.0f32, |a, &b| a.max(b)), p.iter().sum::<f32>());
        if poison.is_nan() {
            check_finite("activations", x)?;
        }
        let scale = 127.0 / max.max(MIN_ACT_MAX);
        // Per rounding mode, a loop without branches, so it compiles to vector code.
        let q = match rounding {
            Rounding::HalfEven => {
                x.iter().map(|&v| Rounding::HalfEven.round((v * scale).clamp(-128.0, 127.0)) as i8).collect()
            }
            Rounding::HalfAway => {
                x.iter().map(|&v| Rounding::HalfAway.round((v * scale).clamp(-128.0, 127.0)) as i8).collect()
            }
        };
        Ok(QuantActs { q, scale })
    }
}

pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), BitnetError> {
    if expected != got {
        return Err(BitnetError::Length { what, expected, got });
    }
    Ok(())
}

fn check_finite(what: &'static str, x: &[f32]) -> Result<(), BitnetError> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(BitnetError::NonFinite { what, index }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn rounding_modes_match_their_definitions() {
        for (x, even, away) in [
            (0.5f32, 0, 1),
            (1.5, 2, 2),
            (2.5, 2, 3),
            (-0.5, 0, -1),
            (-2.5, -2, -3),
            (0.49999997, 0, 0),
            (126.6, 127, 127),
            (-127.5, -128, -128),
        ] {
            assert_eq!(Rounding::HalfEven.round(x), even, "{x}");
            assert_eq!(Rounding::HalfAway.round(x), away, "{x}");
        }
        // Against an independent reference on a dense sweep: f64 rounding of the same values.
        for i in -40_000..40_000 {
            let x = i as f32 * 0.00625;
            let r = x as f64;
            let away = if r >= 0.0 { (r + 0.5).floor() } else { (r - 0.5).ceil() };
            let mut even = r.round();
            if (r - r.trunc()).abs() == 0.5 && even % 2.0 != 0.0 {
                even -= r.signum();
            }
            assert_eq!(Rounding::HalfAway.round(x) as f64, away, "{x}");
            assert_eq!(Rounding::HalfEven.round(x) as f64, even, "{x}");
        }
    }

    #[test]
    fn absmean_weights() {
        let w = [0.1f32, -0.2, 0.05, 0.4, -0.9, 0.0];
        let t = TernaryMatrix::quantize(2, 3, &w).unwrap();
        let beta = w.iter().map(|v| v.abs()).sum::<f32>() / 6.0;
        assert!((t.scale - beta).abs() < 1e-7);
        // beta = 0.275; w / beta = 0.36, -0.73, 0.18, 1.45, -3.27, 0 → 0, -1, 0, 1, -1, 0
        assert_eq!(t.w, [0, -1, 0, 1, -1, 0]);
        assert_eq!(TernaryMatrix::quantize(1, 2, &[0.0, 0.0]).unwrap().scale, MIN_WEIGHT_SCALE);
        assert!(matches!(
            TernaryMatrix::quantize(1, 2, &[0.0, f32::NAN]),
            Err(BitnetError::NonFinite { index: 1, .. })
        ));
        assert!(matches!(TernaryMatrix::quantize(2, 2, &[0.0; 3]), Err(BitnetError::Length { .. })));
        assert!(matches!(
            TernaryMatrix::new(1, 2, alloc::vec![0, 2], 1.0),
            Err(BitnetError::NotTernary { index: 1, value: 2 })
        ));
    }

    #[test]
    fn activations_scale_to_127() {
        let a = quantize_activations(&[1.0, -2.0, 0.5, 0.0], Rounding::HalfEven).unwrap();
        assert_eq!(a.scale, 63.5);
        assert_eq!(a.q, [64, -127, 32, 0]); // 63.5 rounds to even 64; 31.75 → 32
        let zeros = quantize_activations(&[0.0; 4], Rounding::HalfEven).unwrap();
        assert_eq!(zeros.q, [0; 4]);
        assert!(zeros.scale.is_finite());
        assert!(quantize_activations(&[f32::INFINITY], Rounding::HalfEven).is_err());
    }

    /// The eight-lane maximum equals a plain scan, and a non-finite value is named wherever it
    /// sits (in the whole chunks or the remainder, in any lane).
    #[test]
    fn the_lane_wise_scan_finds_the_maximum_and_every_non_finite_value() {
        let mut rng = crate::bitnet::random::Rng::new(9);
        for len in [1, 7, 8, 9, 23, 768] {
            let x: alloc::vec::Vec<f32> = (0..len).map(|_| (rng.next_u64() % 20_001) as f32 / 100.0 - 100.0).collect();
            let max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert_eq!(quantize_activations(&x, Rounding::HalfEven).unwrap().scale, 127.0 / max.max(MIN_ACT_MAX));
            for at in 0..len {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut y = x.clone();
                    y[at] = bad;
                    let err = quantize_activations(&y, Rounding::HalfAway);
                    assert!(
                        matches!(err, Err(BitnetError::NonFinite { index, .. }) if index == at),
                        "{len} {at} {err:?}"
                    );
                }
            }
        }
    }
}
