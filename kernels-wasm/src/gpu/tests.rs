//! The GPU kernels against the CPU: accumulators against the plain dot product, f32 outputs
//! against the threaded CPU driver bit for bit, on the CPU kernels' test shapes and bitnet.cpp's
//! presets. Natively these need a Vulkan adapter (`cargo xtask test` installs Mesa lavapipe);
//! `SUBSTRATES_SKIP_GPU=1` skips them on a machine without one, saying so.

use super::bitnet::GpuMatrix;
use super::{block_on, Gpu, GpuError};
use crate::bitnet::backend::Backend;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::pool::Pool;
use crate::bitnet::quant::{QuantActs, TernaryMatrix};
use crate::bitnet::testutil::{edge_cases, plain_dot, Rng};
use crate::bitnet::threads::{i2s_gemm, lut_gemm};
use crate::bitnet::tiling::{presets, Tile};
use crate::bitnet::tl1::Tl1Matrix;
use crate::bitnet::tl2::Tl2Matrix;
use std::sync::OnceLock;

/// The adapter every test shares, or `None` when skipping is asked for.
fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Result<Gpu, GpuError>> = OnceLock::new();
    match GPU.get_or_init(|| block_on(Gpu::new())) {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var_os("SUBSTRATES_SKIP_GPU").is_some() => {
            eprintln!("SKIPPED (SUBSTRATES_SKIP_GPU is set): {e}");
            None
        }
        Err(e) => panic!(
            "{e}. The GPU tests need a Vulkan adapter: `apt-get install mesa-vulkan-drivers` (Mesa lavapipe), \
             or set SUBSTRATES_SKIP_GPU=1 to skip them"
        ),
    }
}

/// Uploads `t` in `format` with `tile` (the LUT formats) or I2_S's x86 layout.
fn upload(gpu: &Gpu, format: &str, t: &TernaryMatrix, tile: Option<Tile>) -> GpuMatrix {
    match format {
        "I2_S" => GpuMatrix::i2s(gpu, &I2sMatrix::pack(t, I2sLayout::X86).unwrap()).unwrap(),
        "I2_S arm" => GpuMatrix::i2s(gpu, &I2sMatrix::pack(t, I2sLayout::Arm).unwrap()).unwrap(),
        "TL1" => GpuMatrix::tl1(gpu, &Tl1Matrix::pack_with(t, tile.unwrap()).unwrap()).unwrap(),
        _ => GpuMatrix::tl2(gpu, &Tl2Matrix::pack_with(t, tile.unwrap()).unwrap()).unwrap(),
    }
}

fn quantized(q: Vec<i8>) -> QuantActs {
    QuantActs { q, scale: 1.0 }
}

/// The CPU kernels' own test shapes (every bm, both TL2 BKs, with and without a tail).
fn shapes() -> Vec<(&'static str, usize, usize, Option<Tile>)> {
    let t = |bm_tile, bk, bm| Some(Tile { bm_tile, bk, bm });
    vec![
        ("I2_S", 32, 128, None),
        ("I2_S", 96, 512, None),
        ("I2_S arm", 64, 192, None),
        ("TL1", 32, 64, t(32, 64, 32)),
        ("TL1", 64, 128, t(64, 32, 32)),
        ("TL1", 64, 64, t(64, 64, 64)),
        ("TL1", 128, 256, t(128, 256, 64)),
        ("TL1", 96, 192, t(96, 64, 32)),
        ("TL2", 32, 96, t(32, 96, 32)),
        ("TL2", 64, 128, t(64, 96, 32)),
        ("TL2", 64, 224, t(32, 192, 32)),
        ("TL2", 96, 384, t(96, 192, 32)),
        ("TL2", 128, 352, t(64, 96, 32)),
        ("TL2", 160, 768, t(160, 96, 32)),
    ]
}

/// Every accumulator equals `Σ w·q`, on the edge cases (all ±1 weights against ±127 and −128,
/// alternating signs) and random data, several activation rows per dispatch.
#[test]
fn accumulators_equal_the_plain_dot_product() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(5);
    for (format, m, k, tile) in shapes() {
        let mut cases = edge_cases(m, k);
        cases.push((rng.ternary(m, k), rng.acts(k)));
        for (t, q) in cases {
            // TL1 takes −127..=127 (as per_tensor_quant makes them): −128 is I2_S's and TL2's.
            let clamp = |q: Vec<i8>| match format {
                "TL1" => q.iter().map(|&v| v.max(-127)).collect(),
                _ => q,
            };
            let (q, other) = (clamp(q), clamp(rng.acts(k)));
            let gm = upload(gpu, format, &t, tile);
            let got = block_on(gm.gemm_acc(gpu, &[quantized(q.clone()), quantized(other.clone())])).unwrap();
            let want = [plain_dot(&t, &q), plain_dot(&t, &other)].concat();
            assert_eq!(got, want, "{format} {m}x{k} {tile:?}");
        }
    }
}

/// `Y = X·Wᵀ` in f32 on the GPU is bit-identical to the CPU driver, on bitnet.cpp's preset
/// shapes (the 700M model's, one per format and kind) and a batch of activation rows.
#[test]
fn f32_outputs_are_the_cpus_bit_for_bit() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(8);
    let pool = Pool::new(1).unwrap();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let mut cases: Vec<(&str, usize, usize, Option<Tile>)> =
        presets().filter(|p| p.1 * p.2 <= 1536 * 4096).map(|(f, m, k, tile)| (f.name(), m, k, Some(tile))).collect();
    cases.extend([("I2_S", 1536, 4096, None), ("I2_S", 4096, 1536, None)]);
    assert!(cases.iter().any(|c| c.0 == "TL1") && cases.iter().any(|c| c.0 == "TL2"));
    for (format, m, k, tile) in cases {
        let t = TernaryMatrix::quantize(m, k, &rng.f32s(m * k, 1.0)).unwrap();
        let n = 3;
        let xs = rng.f32s(n * k, 4.0);
        let (mut cpu, mut got) = (vec![0.0f32; n * m], vec![0.0f32; n * m]);
        match format {
            "I2_S" => i2s_gemm(&I2sMatrix::pack(&t, I2sLayout::X86).unwrap(), &xs, Backend::Scalar, &pool, &mut cpu),
            "TL1" => lut_gemm(&Tl1Matrix::pack_with(&t, tile.unwrap()).unwrap(), &xs, Backend::Scalar, &pool, &mut cpu),
            _ => lut_gemm(&Tl2Matrix::pack_with(&t, tile.unwrap()).unwrap(), &xs, Backend::Scalar, &pool, &mut cpu),
        }
        .unwrap();
        block_on(upload(gpu, format, &t, tile).gemm(gpu, &xs, &mut got)).unwrap();
        assert_eq!(bits(&got), bits(&cpu), "{format} {m}x{k}");
    }
}

/// Wrong shapes and bad activations are named, never dispatched.
#[test]
fn bad_requests_are_named() {
    let Some(gpu) = gpu() else { return };
    let t = Rng::new(1).ternary(32, 128);
    let gm = upload(gpu, "I2_S", &t, None);
    let mut out = vec![0.0; 32];
    let err = block_on(gm.gemm(gpu, &[0.5; 100], &mut out)).unwrap_err();
    assert!(err.to_string().contains("activations (n rows of K): expected 128 values, got 100"), "{err}");
    let err = block_on(gm.gemm(gpu, &[0.5; 128], &mut [0.0; 31])).unwrap_err();
    assert!(err.to_string().contains("outputs"), "{err}");
    let mut xs = vec![0.5; 128];
    xs[7] = f32::NAN;
    let err = block_on(gm.gemm(gpu, &xs, &mut out)).unwrap_err();
    assert!(err.to_string().contains("non-finite value at index 7"), "{err}");
    let err = block_on(gm.gemm_acc(gpu, &[quantized(vec![0; 64])])).unwrap_err();
    assert!(err.to_string().contains("expected 128 values, got 64"), "{err}");
    let tl1 = upload(gpu, "TL1", &t, Some(Tile { bm_tile: 32, bk: 64, bm: 32 }));
    let err = block_on(tl1.gemm_acc(gpu, &[quantized(vec![-128; 128])])).unwrap_err();
    assert!(err.to_string().contains("activation -128"), "{err}");
}
