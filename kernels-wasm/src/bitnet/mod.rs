//! BitNet b1.58 kernels, as bitnet.cpp defines them: ternary weights ({-1, 0, 1} and one f32
//! scale per tensor) multiplied with int8 activations (one f32 scale per row).
//!
//! Byte layouts as bitnet.cpp stores them (TL2 and GGUF ids included): `FORMATS.md` here.
//!
//! - [`blob`]: packed bytes, owned or a window into a memory-mapped file.
//! - [`quant`]: absmean weight quantisation and per-tensor activation quantisation.
//! - [`i2s`]: I2_S, 2-bit codes and a multiply-add kernel.
//! - [`lut`]: the activation-pair tables (`lut_ctor`).
//! - [`lut_matrix`]: TL1 and TL2 behind one trait, with the shared f32 epilogue.
//! - [`tl1`]: TL1, 4-bit pair indices looked up in those tables (`qgemm_lut`).
//! - [`tl2`]: TL2, 4-bit triplet magnitudes and sign bits, plus a TL1-style two-weight tail.
//! - [`random`]: deterministic test and benchmark data.
//! - [`pool`] (with `std`): persistent worker threads, as ggml keeps them.
//! - [`threads`] (with `std`): thread 0 prepares, a barrier, every thread computes its rows;
//!   GEMV and GEMM for every format.
//! - [`model`]: whole models (GGUF in and out, the forward pass, tokenizer, sampling).
//! - [`trace`]: the scalar kernels step by step, for the playground.
//! - [`tiling`]: BM / BK / bm per shape, the formats' shape rules, `wsize`, `can_mul_mat`.
//!
//! Every kernel produces an exact int32 accumulator per output (the dot product of the ternary
//! weights with the int8 activations) and then one shared f32 epilogue, so every backend and
//! thread count gives bit-identical results.

pub mod backend;
pub mod blob;
pub mod i2s;
pub mod lut;
pub mod lut_matrix;
pub mod model;
#[cfg(feature = "std")]
pub mod pool;
pub mod quant;
pub mod random;
#[cfg(test)]
pub(crate) mod testutil;
#[cfg(feature = "std")]
pub mod threads;
pub mod tiling;
pub mod tl1;
pub mod tl2;
pub mod trace;
pub mod wide;

/// Errors of the BitNet kernels: always naming the shape or value that was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BitnetError {
    #[error("{what}: expected {expected} values, got {got}")]
    Length { what: &'static str, expected: usize, got: usize },
    #[error("{format} cannot take a {m}x{k} matrix: {why}")]
    Shape { format: &'static str, m: usize, k: usize, why: alloc::string::String },
    #[error("{what} contains a non-finite value at index {index}")]
    NonFinite { what: &'static str, index: usize },
    #[error("activation -128 at index {index}: LUT kernels take -127..=127, as per_tensor_quant produces")]
    ActivationRange { index: usize },
    #[error("weight {value} at index {index} is not ternary (-1, 0 or 1)")]
    NotTernary { index: usize, value: i8 },
    #[error("a worker thread panicked; the outputs are incomplete")]
    WorkerPanicked,
}

/// The shared epilogue: `C = acc / act_scale * weight_scale`, in this order, in f32, as
/// bitnet.cpp computes it. Every backend ends here so results match bit for bit.
#[inline(always)]
pub fn dequantize(acc: i32, act_scale: f32, weight_scale: f32) -> f32 {
    acc as f32 / act_scale * weight_scale
}

wide::wide_fn! {
    /// [`dequantize`] of a run of accumulators into outputs.
    pub fn dequantize_into(out: &mut [f32], acc: &[i32], act_scale: f32, weight_scale: f32) {
        for (o, &a) in out.iter_mut().zip(acc) {
            *o = dequantize(a, act_scale, weight_scale);
        }
    }
}
