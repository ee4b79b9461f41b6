//! The GPU checks (`checks`) natively, on the machine's Vulkan adapter (Mesa lavapipe under
//! `cargo xtask test`), sharing one device; plus what only a native build can test.

use super::{block_on, checks, Gpu, GpuError};
use crate::bitnet::backend::Backend;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::pool::Pool;
use crate::bitnet::quant::TernaryMatrix;
use crate::bitnet::random::Rng;
use crate::bitnet::threads::i2s_gemm;
use std::sync::OnceLock;

/// The adapter every test shares, or `None` when skipping is asked for.
fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Result<Gpu, GpuError>> = OnceLock::new();
    match GPU.get_or_init(|| block_on(Gpu::new())) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            checks::no_adapter(e.clone(), std::env::var_os("SUBSTRATES_SKIP_GPU").is_some());
            None
        }
    }
}

#[test]
fn accumulators_equal_the_plain_dot_product() {
    if let Some(g) = gpu() {
        block_on(checks::accumulators_equal_the_plain_dot_product(g))
    }
}

#[test]
fn f32_outputs_are_the_cpus_bit_for_bit() {
    if let Some(g) = gpu() {
        block_on(checks::f32_outputs_are_the_cpus_bit_for_bit(g))
    }
}

#[test]
fn bad_requests_are_named() {
    if let Some(g) = gpu() {
        block_on(checks::bad_requests_are_named(g))
    }
}

/// The GPU GEMM equals the threaded CPU driver (two threads) on a 700M shape with a batch that
/// the driver splits across threads.
#[test]
fn f32_outputs_are_the_threaded_drivers() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(12);
    let t = TernaryMatrix::quantize(1536, 1536, &rng.f32s(1536 * 1536, 1.0)).unwrap();
    let p = I2sMatrix::pack(&t, I2sLayout::X86).unwrap();
    let xs = rng.f32s(5 * 1536, 2.0);
    let (mut cpu, mut got) = (vec![0.0f32; 5 * 1536], vec![0.0f32; 5 * 1536]);
    i2s_gemm(&p, &xs, Backend::Scalar, &Pool::new(2).unwrap(), &mut cpu).unwrap();
    block_on(super::bitnet::GpuMatrix::i2s(gpu, &p).unwrap().gemm(gpu, &xs, &mut got)).unwrap();
    assert!(got.iter().zip(&cpu).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Without an adapter (an instance with no backend to offer one) the error says so.
#[test]
fn no_adapter_is_named() {
    let err = block_on(Gpu::with_backends(wgpu::Backends::empty())).err().unwrap();
    assert!(matches!(err, GpuError::NoAdapter(_)), "{err}");
    assert!(err.to_string().starts_with("no GPU adapter: "), "{err}");
}
