use super::*;
use crate::bitnet::lut_matrix::LutMatrix;
use crate::bitnet::quant::{quantize_activations, QuantActs, Rounding};
use crate::bitnet::testutil::{edge_cases, plain_dot, Rng};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn tables(q: &[i8], three_k: usize) -> Tl2Tables {
    Tl2Tables::from_quantized(&QuantActs { q: q.to_vec(), scale: 1.0 }, three_k).unwrap()
}

/// Both BKs, with and without a two-weight tail, several BM, and a seed shape's 4032 + 64 split.
const SHAPES: [(usize, usize, Tile); 7] = [
    (32, 96, Tile { bm_tile: 32, bk: 96, bm: 32 }),
    (64, 128, Tile { bm_tile: 64, bk: 96, bm: 32 }),
    (64, 224, Tile { bm_tile: 32, bk: 192, bm: 32 }),
    (96, 384, Tile { bm_tile: 96, bk: 192, bm: 32 }),
    (128, 352, Tile { bm_tile: 64, bk: 96, bm: 32 }),
    (160, 768, Tile { bm_tile: 160, bk: 96, bm: 32 }),
    (256, 4096, Tile { bm_tile: 256, bk: 96, bm: 32 }),
];

#[test]
fn pack_and_unpack_are_inverse() {
    let mut rng = Rng::new(31);
    for (m, k, tile) in SHAPES {
        let t = rng.ternary(m, k);
        let p = Tl2Matrix::pack_with(&t, tile).unwrap();
        let (three, two) = tile.tl2_split(k);
        assert_eq!(p.packed.len(), three * m / 6 + three * m / 24 + two * m / 4);
        assert_eq!(p.unpack(), t, "{m}x{k} {tile:?}");
    }
}

/// The converter's formulas, decoded digit by digit from each byte's position (independent of
/// [`Geometry`]): magnitudes, sign bits and tail of a 64×320 matrix (BK 96: three_k 288, two_k 32).
#[test]
fn byte_layout_matches_the_converters_formulas() {
    let (m, k, tile) = (64, 320, Tile { bm_tile: 64, bk: 96, bm: 32 });
    let t = Rng::new(32).ternary(m, k);
    let p = Tl2Matrix::pack_with(&t, tile).unwrap();
    let (bm_tile, bk) = (tile.bm_tile, tile.bk);
    let (three_k, two_k) = (288, 32);
    let row_map = |pos: usize| match pos / 8 {
        1 => 16 + pos % 8,
        2 => 8 + pos % 8,
        _ => pos,
    };
    let value = |row: usize, tr: usize| {
        let w = &t.w[row * k + 3 * tr..];
        9 * w[0] + 3 * w[1] + w[2]
    };
    let digits = |mut rest: usize, radix: &[usize]| {
        let mut d = alloc::vec![0; radix.len()];
        for i in (0..radix.len()).rev() {
            d[i] = rest % radix[i];
            rest /= radix[i];
        }
        d
    };
    let mag_bytes = three_k * m / 6;
    for pos in 0..mag_bytes {
        let d = digits(pos, &[m / bm_tile, three_k / bk, bm_tile / 32, bk / 6, 32]);
        let (tt, kb, rb, sb, ps) = (d[0], d[1], d[2], d[3], d[4]);
        let row = tt * bm_tile + rb * 32 + row_map(ps);
        let tr = kb * bk / 3 + 2 * sb;
        let expected = value(row, tr).unsigned_abs() << 4 | value(row, tr + 1).unsigned_abs();
        assert_eq!(p.packed[pos], expected, "magnitude byte {pos}");
    }
    let sign_bytes = three_k * m / 24;
    for pos in (0..sign_bytes).step_by(2) {
        let d = digits(pos / 2, &[m / bm_tile, three_k / bk, bm_tile / 32, bk / 24, 16]);
        let (tt, kb, rb, q, lane) = (d[0], d[1], d[2], d[3], d[4]);
        let bits = u16::from_le_bytes([p.packed[mag_bytes + pos], p.packed[mag_bytes + pos + 1]]);
        for a in 0..16 {
            let row = tt * bm_tile + rb * 32 + lane + 16 * (a % 2);
            let tr = kb * bk / 3 + 8 * q + a / 2;
            assert_eq!(bits >> (15 - a) & 1 == 1, value(row, tr) < 0, "sign lane {lane} bit {a} of group {q}");
        }
    }
    for pos in 0..two_k * m / 4 {
        let d = digits(pos, &[m / bm_tile, two_k / 32, bm_tile / 32, 8, 32]);
        let (tt, kb, rb, sb, ps) = (d[0], d[1], d[2], d[3], d[4]);
        let row = tt * bm_tile + rb * 32 + row_map(ps);
        let c = row * k + three_k + 2 * (kb * 16 + 2 * sb);
        let expected = ((3 * t.w[c] + t.w[c + 1] + 4) << 4 | (3 * t.w[c + 2] + t.w[c + 3] + 4)) as u8;
        assert_eq!(p.packed[mag_bytes + sign_bytes + pos], expected, "tail byte {pos}");
    }
}

#[test]
fn shapes_tl2_cannot_take_are_refused() {
    let t = Rng::new(33).ternary(64, 200);
    assert!(Tl2Matrix::pack(&t).is_err());
    let t = Rng::new(33).ternary(64, 192);
    let err = Tl2Matrix::pack_with(&t, Tile { bm_tile: 64, bk: 96, bm: 64 }).unwrap_err();
    assert!(alloc::format!("{err}").contains("bm = 32"), "{err}");
    let p = Tl2Matrix::pack(&t).unwrap();
    assert!(p.gemv_acc(&tables(&[0; 189], 189), Backend::Scalar, &mut [0; 64]).is_err());
    assert!(p.gemv_acc(&tables(&[0; 192], 192), Backend::Scalar, &mut [0; 63]).is_err());
    assert!(p.tables(&[0.0; 190]).is_err());
}

#[test]
fn every_backend_equals_the_plain_dot_product() {
    let mut rng = Rng::new(34);
    for (m, k, tile) in SHAPES {
        let mut cases = edge_cases(m, k);
        cases.push((rng.ternary(m, k), rng.acts(k)));
        for (t, q) in cases {
            // TL2 takes -128 too: its int16 sums stay in range (see Tl2Tables).
            let expected = plain_dot(&t, &q);
            let p = Tl2Matrix::pack_with(&t, tile).unwrap();
            let tab = tables(&q, p.geometry.three_k);
            for backend in Backend::available() {
                let mut acc = alloc::vec![0; m];
                p.gemv_acc(&tab, backend, &mut acc).unwrap();
                assert_eq!(acc, expected, "{backend:?} {m}x{k} {tile:?}");
            }
        }
    }
}

/// Two activation rows at once (prompt processing) give each row's plain dot products, on
/// every tile shape and for a tile range that does not start at tile 0.
#[test]
fn two_activation_rows_at_once_equal_the_plain_dot_product() {
    let mut rng = Rng::new(35);
    for (m, k, tile) in SHAPES {
        let t = rng.ternary(m, k);
        let (qa, qb) = (rng.acts(k), rng.acts(k));
        let p = Tl2Matrix::pack_with(&t, tile).unwrap();
        let tabs = [tables(&qa, p.geometry.three_k), tables(&qb, p.geometry.three_k)];
        let (ea, eb) = (plain_dot(&t, &qa), plain_dot(&t, &qb));
        let tiles = p.geometry.tiles();
        for backend in Backend::available() {
            for first in [0, tiles - 1] {
                let rows = (tiles - first) * tile.bm_tile;
                let mut acc = alloc::vec![0; 2 * rows];
                p.acc_tiles2([&tabs[0], &tabs[1]], backend, first..tiles, &mut acc).unwrap();
                let skip = first * tile.bm_tile;
                assert_eq!(acc[..rows], ea[skip..], "{backend:?} {m}x{k} {tile:?} from tile {first}");
                assert_eq!(acc[rows..], eb[skip..], "{backend:?} {m}x{k} {tile:?} from tile {first}");
            }
            let mut short = alloc::vec![0; 2 * m - 1];
            assert!(p.acc_tiles2([&tabs[0], &tabs[1]], backend, 0..tiles, &mut short).is_err());
        }
    }
}

#[test]
fn f32_outputs_are_identical_across_backends_and_near_f32() {
    let mut rng = Rng::new(35);
    let (m, k) = (96, 416);
    let t = rng.ternary(m, k);
    let x = rng.f32s(k, 3.0);
    let p = Tl2Matrix::pack(&t).unwrap();
    assert_eq!(p.geometry.two_k, 32);
    let tab = p.tables(&x).unwrap();
    let acts = quantize_activations(&x, Rounding::HalfEven).unwrap();
    let mut y = alloc::vec![0f32; m];
    p.gemv(&tab, Backend::Scalar, &mut y).unwrap();
    for (r, &yr) in y.iter().enumerate() {
        // Each int8 is off by at most half a step (1 / (2·scale)): the error bound is
        // weight_scale · Σ|w| · 0.5 / act_scale (plus f32 rounding of the epilogue).
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

/// Small enough to run under Miri, which is how `cargo xtask test` checks the AVX-512 kernels on
/// CPUs without AVX-512 (Miri interprets the intrinsics): every backend against the plain dot
/// product, with a tail and without.
#[test]
fn wide_kernels_match_scalar_small() {
    let mut rng = Rng::new(36);
    for (m, k) in [(32, 96), (32, 224)] {
        let t = rng.ternary(m, k);
        let q = rng.acts(k);
        let p = Tl2Matrix::pack(&t).unwrap();
        let tab = tables(&q, p.geometry.three_k);
        if option_env!("SUBSTRATES_EXPECT_AVX512").is_some() {
            assert!(Backend::Avx512.is_available(), "this run was meant to check the AVX-512 kernel");
        }
        for backend in Backend::available() {
            let mut acc = alloc::vec![0; m];
            p.gemv_acc(&tab, backend, &mut acc).unwrap();
            assert_eq!(acc, plain_dot(&t, &q), "{backend:?} {m}x{k}");
        }
    }
}
