use super::*;
use crate::bitnet::quant::{quantize_activations, Rounding};
use crate::bitnet::testutil::{edge_cases, plain_dot, Rng};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LAYOUTS: [I2sLayout; 2] = [I2sLayout::X86, I2sLayout::Arm];

#[test]
fn pack_and_unpack_are_inverse() {
    let mut rng = Rng::new(1);
    for layout in LAYOUTS {
        for (m, k) in [(1, 128), (3, 256), (17, 384), (64, 1536)] {
            let t = rng.ternary(m, k);
            let packed = I2sMatrix::pack(&t, layout).unwrap();
            assert_eq!(packed.codes.len(), m * k / 4);
            assert_eq!(packed.unpack(), t, "{layout:?} {m}x{k}");
        }
    }
}

#[test]
fn byte_layout_is_bitnet_cpps() {
    // Weight j of a block alone at +1 (code 2), the rest at -1 (code 0): only byte j % 32
    // carries a bit pair, at shift 6 - 2·(j / 32).
    for j in 0..128 {
        let mut w = alloc::vec![-1i8; 256];
        w[128 + j] = 1; // second block, to check the block offset too
        let t = TernaryMatrix::new(1, 256, w, 1.0).unwrap();
        let p = I2sMatrix::pack(&t, I2sLayout::X86).unwrap();
        for (i, &byte) in p.codes.iter().enumerate() {
            let expected = if i == 32 + j % 32 { 2u8 << (6 - 2 * (j / 32)) } else { 0 };
            assert_eq!(byte, expected, "weight {j}, byte {i}");
        }
    }
}

#[test]
fn shapes_the_format_cannot_take_are_refused() {
    let t = Rng::new(2).ternary(4, 200);
    let err = I2sMatrix::pack(&t, I2sLayout::X86).unwrap_err();
    assert!(alloc::format!("{err}").contains("multiple of 128"), "{err}");
    let p = I2sMatrix::pack(&Rng::new(3).ternary(4, 128), I2sLayout::X86).unwrap();
    assert!(matches!(p.gemv_acc(&[0; 127], Backend::Scalar, &mut [0; 4]), Err(BitnetError::Length { .. })));
    assert!(matches!(p.gemv_acc(&[0; 128], Backend::Scalar, &mut [0; 3]), Err(BitnetError::Length { .. })));
}

/// Every backend available here, on random and edge inputs, equals the plain dot product.
#[test]
fn every_backend_equals_the_plain_dot_product() {
    let mut rng = Rng::new(4);
    for layout in LAYOUTS {
        for (m, k) in [(1, 128), (5, 256), (8, 640), (32, 768), (7, 3072)] {
            let mut cases = edge_cases(m, k);
            for _ in 0..3 {
                cases.push((rng.ternary(m, k), rng.acts(k)));
            }
            for (t, q) in cases {
                let expected = plain_dot(&t, &q);
                let p = I2sMatrix::pack(&t, layout).unwrap();
                for backend in Backend::available() {
                    let mut acc = alloc::vec![0; m];
                    p.gemv_acc(&q, backend, &mut acc).unwrap();
                    assert_eq!(acc, expected, "{backend:?} {layout:?} {m}x{k}");
                }
            }
        }
    }
}

/// One to five activation rows at once (prompt processing) give each row's plain dot products,
/// also for a row block that does not start at row 0 or fill whole quads, and for K that is an
/// odd number of blocks.
#[test]
fn several_activation_rows_at_once_equal_the_plain_dot_product() {
    let mut rng = Rng::new(5);
    for layout in LAYOUTS {
        for (m, k) in [(4, 128), (11, 256), (32, 768), (9, 384)] {
            let t = rng.ternary(m, k);
            let qs: Vec<Vec<i8>> = (0..5).map(|_| rng.acts(k)).collect();
            let expected: Vec<Vec<i32>> = qs.iter().map(|q| plain_dot(&t, q)).collect();
            let p = I2sMatrix::pack(&t, layout).unwrap();
            for backend in Backend::available() {
                for n in 1..=5 {
                    let q: Vec<&[i8]> = qs[..n].iter().map(|q| &q[..]).collect();
                    let sums: Vec<i32> = q.iter().map(|q| q_sum(q)).collect();
                    for first in [0, 1] {
                        let rows = m - first;
                        let mut acc = alloc::vec![0; n * rows];
                        p.gemm_acc_rows(&q, &sums, backend, first, &mut acc).unwrap();
                        for (a, e) in acc.chunks_exact(rows).zip(&expected) {
                            assert_eq!(a, &e[first..], "{backend:?} {layout:?} {m}x{k}, {n} rows from {first}");
                        }
                    }
                }
            }
            let q = [&qs[0][..], &qs[1][..]];
            let mut acc = alloc::vec![0; 2 * m + 2];
            let err = p.gemm_acc_rows(&q, &[0, 0], Backend::best(), 0, &mut acc);
            assert!(matches!(err, Err(BitnetError::Length { .. })), "{err:?}");
            let err = p.gemm_acc_rows(&q, &[0], Backend::best(), 0, &mut acc[..2 * m]);
            assert!(matches!(err, Err(BitnetError::Length { .. })), "{err:?}");
        }
    }
}

/// The f32 result differs from an f32 matmul with the ternary weights only by activation
/// quantisation: each |x_k − q_k/s| ≤ 0.5/s, so |y − ŷ| ≤ β·Σ_k|w_k|·0.5/s, plus f32 rounding
/// of the sums (bounded here by 1e-5 of the magnitudes involved).
#[test]
fn f32_output_is_within_the_activation_quantisation_bound() {
    let mut rng = Rng::new(5);
    let (m, k) = (16, 512);
    let t = rng.ternary(m, k);
    let x = rng.f32s(k, 3.0);
    let acts = quantize_activations(&x, Rounding::HalfEven).unwrap();
    let p = I2sMatrix::pack(&t, I2sLayout::X86).unwrap();
    let mut y = alloc::vec![0f32; m];
    p.gemv(&acts, Backend::Scalar, &mut y).unwrap();
    for (r, &yr) in y.iter().enumerate() {
        let exact: f64 = t.row(r).iter().zip(&x).map(|(&w, &v)| w as f64 * v as f64).sum::<f64>() * t.scale as f64;
        let l1: f64 = t.row(r).iter().map(|w| w.abs() as f64).sum();
        let bound = t.scale as f64 * l1 * 0.5 / acts.scale as f64;
        let magnitude: f64 = x.iter().map(|v| v.abs() as f64).sum::<f64>() * t.scale as f64;
        assert!((yr as f64 - exact).abs() <= bound + 1e-5 * magnitude, "row {r}: {yr} vs {exact}, bound {bound}");
    }
    // Every backend's f32 outputs are identical to the scalar ones.
    for backend in Backend::available() {
        let mut yb = alloc::vec![0f32; m];
        p.gemv(&acts, backend, &mut yb).unwrap();
        assert_eq!(
            yb.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// Small enough for Miri (see the TL2 test of the same name): every backend, both layouts.
#[test]
fn wide_kernels_match_scalar_small() {
    let mut rng = Rng::new(7);
    for layout in LAYOUTS {
        let t = rng.ternary(4, 256);
        let q = rng.acts(256);
        let p = I2sMatrix::pack(&t, layout).unwrap();
        if option_env!("SUBSTRATES_EXPECT_AVX512").is_some() {
            assert!(Backend::Avx512.is_available(), "this run was meant to check the AVX-512 kernel");
        }
        for backend in Backend::available() {
            let mut acc = alloc::vec![0; 4];
            p.gemv_acc(&q, backend, &mut acc).unwrap();
            assert_eq!(acc, plain_dot(&t, &q), "{backend:?} {layout:?}");
        }
    }
}

/// `gemm(p, q, sums, first, acc)`: a 32-row block kernel.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
type BlockGemm = dyn Fn(&I2sMatrix, &[&[i8]], &[i32], usize, &mut Emit) -> Result<(), BitnetError>;

/// A 32-row block kernel (`gemm(p, q, sums, first, emit)`) gives the plain dot products for
/// every activation count around its groups (4 rows for VNNI; 16 and the 32-row pair for AMX),
/// from row blocks that do not start at row 0, and refuses rows past the end.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
fn check_block_gemm(what: &str, gemm: &BlockGemm) {
    let mut rng = Rng::new(8);
    // Miri interprets every vector instruction: one small shape there.
    let (shapes, counts): (&[(usize, usize)], &[usize]) = if cfg!(miri) {
        (&[(32, 256)], &[1, 5])
    } else {
        (&[(64, 128), (96, 768), (32, 2048)], &[1, 3, 4, 5, 8, 15, 16, 17, 32, 33, 49])
    };
    for &(m, k) in shapes {
        let t = rng.ternary(m, k);
        let p = I2sMatrix::pack(&t, I2sLayout::X86).unwrap();
        let most = counts.iter().copied().max().unwrap_or(1);
        let qs: Vec<Vec<i8>> = (0..most).map(|_| rng.acts(k)).collect();
        let expected: Vec<Vec<i32>> = qs.iter().map(|q| plain_dot(&t, q)).collect();
        for &n in counts {
            let q: Vec<&[i8]> = qs[..n].iter().map(|q| &q[..]).collect();
            let sums: Vec<i32> = q.iter().map(|q| q_sum(q)).collect();
            for first in (0..m).step_by(32) {
                // The runs must come in order, each row once.
                let (mut acc, mut next) = (alloc::vec![0; n * 32], 0);
                gemm(&p, &q, &sums, first, &mut |t0, runs| {
                    assert_eq!(t0, next, "{what}: rows emitted out of order");
                    acc[32 * t0..][..runs.len()].copy_from_slice(runs);
                    next += runs.len() / 32;
                })
                .unwrap();
                assert_eq!(next, n, "{what}: {n} rows, {next} emitted");
                for (a, e) in acc.chunks_exact(32).zip(&expected) {
                    assert_eq!(a, &e[first..first + 32], "{what}: {m}x{k}, {n} rows from {first}");
                }
            }
        }
        let err = gemm(&p, &[&qs[0][..]], &[0], m - 16, &mut |_, _| {});
        assert!(matches!(err, Err(BitnetError::Length { .. })), "{what}: {err:?}");
    }
}

/// The AMX tiles. (Where this CPU has no AMX the same call runs the VNNI/AVX2 kernels; the
/// check is the same.)
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[test]
fn amx_tiles_equal_the_plain_dot_product() {
    if std::env::var_os("SUBSTRATES_EXPECT_AMX").is_some() {
        assert!(amx::available(), "this run was meant to check the AMX kernel");
    }
    check_block_gemm(&alloc::format!("AMX {}", amx::available()), &|p, q, sums, first, emit| {
        p.gemm_amx(q, &amx::pack_acts(q, p.cols), sums, first, emit)
    });
}

/// The VNNI and AVX2 kernels on 32-row blocks unpacked to bytes (where a backend is missing,
/// the fallback), and the two unpackings' bytes equal.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[test]
fn unpacked_blocks_equal_the_plain_dot_product() {
    for backend in [Backend::Avx512, Backend::Avx2] {
        check_block_gemm(
            &alloc::format!("unpacked, {backend:?} {}", backend.is_available()),
            &move |p, q, sums, first, emit| p.gemm_unpacked(q, sums, backend, first, emit),
        );
    }
    if Backend::Avx512.is_available() {
        let p = I2sMatrix::pack(&Rng::new(9).ternary(32, 384), I2sLayout::X86).unwrap();
        let mut got = [alloc::vec![0u8; unpacked::unpacked_len(384)], alloc::vec![1u8; unpacked::unpacked_len(384)]];
        // SAFETY: AVX-512 BW and AVX2 are available; 32 rows of 96 bytes into 32·384.
        unsafe {
            unpacked::unpack_block(&p.codes, 384, &mut got[0]);
            unpacked::unpack_block_avx2(&p.codes, 384, &mut got[1]);
        }
        assert!(got[0] == got[1], "the AVX2 unpacking differs from the AVX-512 one");
    }
}

/// The AVX2 block kernel's int16 segments at their bound: every code 3 (which no ternary
/// weight packs to, but a file may hold) against activations of −128 and 127, over a K of
/// several segments, give the plain dot product.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[test]
fn unpacked_avx2_segments_hold_at_the_extremes() {
    let k = 3 * unpacked::SEGMENT + 256;
    for fill in [-128i8, 127] {
        let q = alloc::vec![fill; k];
        let mut p = I2sMatrix::pack(&Rng::new(10).ternary(32, k), I2sLayout::X86).unwrap();
        p.codes = alloc::vec![0xFFu8; 32 * k / 4].into();
        let want: Vec<i32> = (0..32).map(|r| scalar::dot(p.row_codes(r), &q, p.layout) - q_sum(&q)).collect();
        assert_eq!(want[0], 3 * k as i32 * fill as i32 - k as i32 * fill as i32);
        let mut got = alloc::vec![0; 32];
        p.gemm_unpacked(&[&q], &[q_sum(&q)], Backend::Avx2, 0, &mut |_, runs| got.copy_from_slice(runs)).unwrap();
        assert_eq!(got, want, "codes 3 against {fill}");
    }
}
