use super::*;
use crate::bitnet::lut_matrix::LutMatrix;
use crate::bitnet::quant::{quantize_activations, QuantActs, Rounding};
use crate::bitnet::testutil::{edge_cases, plain_dot, Rng};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn tables(q: &[i8]) -> PairTables {
    PairTables::from_quantized(&QuantActs { q: q.to_vec(), scale: 1.0 }).unwrap()
}

/// Small shapes with every bm and several BM/BK, plus the seed's 1536-row shapes.
const SHAPES: [(usize, usize, Tile); 7] = [
    (32, 64, Tile { bm_tile: 32, bk: 64, bm: 32 }),
    (64, 128, Tile { bm_tile: 64, bk: 32, bm: 32 }),
    (64, 64, Tile { bm_tile: 64, bk: 64, bm: 64 }),
    (128, 256, Tile { bm_tile: 128, bk: 256, bm: 64 }),
    (96, 192, Tile { bm_tile: 96, bk: 64, bm: 32 }),
    (1536, 1536, Tile { bm_tile: 128, bk: 64, bm: 64 }),
    (256, 4096, Tile { bm_tile: 256, bk: 128, bm: 32 }),
];

#[test]
fn pack_and_unpack_are_inverse() {
    let mut rng = Rng::new(11);
    for (m, k, tile) in SHAPES {
        let t = rng.ternary(m, k);
        let p = Tl1Matrix::pack_with(&t, tile).unwrap();
        assert_eq!(p.packed.len(), m * k / 4);
        assert_eq!(p.unpack(), t, "{m}x{k} {tile:?}");
    }
}

#[test]
fn byte_layout_matches_the_converters_index_formula() {
    // Decompose every byte position p in the mixed radix of bitnet.cpp's converter and check
    // that it holds (row, pair_hi) and (row, pair_hi + 1) as the formula says.
    let (m, k) = (64, 128);
    for tile in [Tile { bm_tile: 64, bk: 64, bm: 32 }, Tile { bm_tile: 64, bk: 128, bm: 64 }] {
        let t = Rng::new(12).ternary(m, k);
        let p = Tl1Matrix::pack_with(&t, tile).unwrap();
        let (bm_tile, bk, bm) = (tile.bm_tile, tile.bk, tile.bm);
        let by = 256 / bm;
        let radix = [m / bm_tile, k / bk, bm_tile / bm, bk / by, bm / 16, by / 4, 16];
        for (pos, &byte) in p.packed.iter().enumerate() {
            let mut digits = [0usize; 7];
            let mut rest = pos;
            for i in (0..7).rev() {
                digits[i] = rest % radix[i];
                rest /= radix[i];
            }
            let [tt, kb, rb, sb, g, h, r] = digits;
            let row = tt * bm_tile + rb * bm + g * 16 + r;
            let pair = kb * bk / 2 + sb * by / 2 + 2 * h;
            let w = |c: usize| t.w[row * k + c];
            let expected = pair_index(w(2 * pair), w(2 * pair + 1)) << 4 | pair_index(w(2 * pair + 2), w(2 * pair + 3));
            assert_eq!(byte, expected, "{tile:?} byte {pos}");
        }
    }
}

#[test]
fn shapes_tl1_cannot_take_are_refused() {
    let t = Rng::new(13).ternary(48, 64);
    assert!(Tl1Matrix::pack(&t).is_err()); // 48 rows: no BM divides it
    let t = Rng::new(13).ternary(64, 64);
    let err = Tl1Matrix::pack_with(&t, Tile { bm_tile: 64, bk: 48, bm: 32 }).unwrap_err();
    assert!(alloc::format!("{err}").contains("BK"), "{err}");
    let p = Tl1Matrix::pack(&t).unwrap();
    assert!(p.gemv_acc(&tables(&[0; 62]), Backend::Scalar, &mut [0; 64]).is_err());
    assert!(p.gemv_acc(&tables(&[0; 64]), Backend::Scalar, &mut [0; 63]).is_err());
}

#[test]
fn every_backend_equals_the_plain_dot_product() {
    let mut rng = Rng::new(14);
    for (m, k, tile) in SHAPES {
        let mut cases = edge_cases(m, k);
        cases.push((rng.ternary(m, k), rng.acts(k)));
        for (t, mut q) in cases {
            // per_tensor_quant never makes -128; the tables refuse it (see PairTables).
            q.iter_mut().for_each(|v| *v = (*v).max(-127));
            let expected = plain_dot(&t, &q);
            let p = Tl1Matrix::pack_with(&t, tile).unwrap();
            let tab = tables(&q);
            for backend in Backend::available() {
                let mut acc = alloc::vec![0; m];
                p.gemv_acc(&tab, backend, &mut acc).unwrap();
                assert_eq!(acc, expected, "{backend:?} {m}x{k} {tile:?}");
            }
        }
    }
}

#[test]
fn f32_outputs_are_identical_across_backends_and_near_f32() {
    let mut rng = Rng::new(15);
    let (m, k) = (64, 256);
    let t = rng.ternary(m, k);
    let x = rng.f32s(k, 2.0);
    let p = Tl1Matrix::pack(&t).unwrap();
    let tab = PairTables::build(&x).unwrap();
    let acts = quantize_activations(&x, Rounding::HalfEven).unwrap();
    assert_eq!(tab.scale, acts.scale);
    let mut y = alloc::vec![0f32; m];
    p.gemv(&tab, Backend::Scalar, &mut y).unwrap();
    for (r, &yr) in y.iter().enumerate() {
        let exact: f64 = t.row(r).iter().zip(&x).map(|(&w, &v)| w as f64 * v as f64).sum::<f64>() * t.scale as f64;
        let bound = t.scale as f64 * t.row(r).iter().map(|w| w.abs() as f64).sum::<f64>() * 0.5 / acts.scale as f64;
        assert!((yr as f64 - exact).abs() <= bound * 1.0001 + 1e-5, "row {r}");
    }
    for backend in Backend::available() {
        let mut yb = alloc::vec![0f32; m];
        p.gemv(&tab, backend, &mut yb).unwrap();
        assert!(yb.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()), "{backend:?}");
    }
}
