//! From f32/f16 BitNet weights to ternary ones, as bitnet.cpp's converter and `quantize_i2_s`
//! do it.
//!
//! A BitNet checkpoint's linear weights are either already snapped to `{−β, 0, β}` (what the
//! converter writes into an f32 GGUF) or raw latent weights. Snapped weights keep their values:
//! codes `sign(w)` (|w| < 1e-6 is 0) and scale `max|w|`, exactly `quantize_i2_s`. Raw weights
//! are snapped first with absmean (`β = mean|w|`, `round(w/β)` clamped to ±1).

use crate::bitnet::quant::TernaryMatrix;
use crate::bitnet::BitnetError;

/// `rows × cols` f32 weights (row-major) as a ternary matrix with its scale.
pub fn ternary(rows: usize, cols: usize, w: &[f32]) -> Result<TernaryMatrix, BitnetError> {
    let max = w.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs()));
    let snapped = w.iter().all(|&v| v.abs() < 1e-6 || v.abs() as f64 == max);
    if !snapped {
        return TernaryMatrix::quantize(rows, cols, w);
    }
    let codes = w
        .iter()
        .map(|&v| {
            if v.abs() < 1e-6 {
                0
            } else if v > 0.0 {
                1
            } else {
                -1
            }
        })
        .collect();
    TernaryMatrix::new(rows, cols, codes, max as f32)
}
