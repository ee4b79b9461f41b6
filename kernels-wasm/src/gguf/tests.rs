//! The parser against the writer, hostile and truncated files, and the block formats against
//! their definitions. Bit-exactness against candle's dequantiser is tested by native-host.

use super::*;
use alloc::vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn sample() -> GgufWriter {
    let mut w = GgufWriter::default();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(2))
        .meta("llama.rope.freq_base", Value::F32(1e5))
        .meta("tokenizer.ggml.tokens", Value::Array(vec![Value::String("a".into()), Value::String("bc".into())]))
        .meta("flags", Value::Array(vec![Value::I32(-1), Value::I32(3)]))
        .f32_tensor("w", &[3, 2], &[1.0, -2.0, 3.5, 0.0, 1e-3, -7.0])
        .f32_tensor("b", &[1], &[9.0]);
    w
}

#[test]
fn what_the_writer_writes_parses_back() {
    let bytes = sample().to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.get("general.architecture").and_then(Value::as_str), Some("llama"));
    assert_eq!(g.get("llama.block_count").and_then(Value::as_u64), Some(2));
    assert_eq!(g.get("llama.rope.freq_base").and_then(Value::as_f64), Some(1e5));
    assert_eq!(g.get("flags").and_then(Value::as_array).map(|a| a.len()), Some(2));
    let w = g.tensor("w").unwrap();
    assert_eq!((w.dims.as_slice(), w.ty, w.elements()), (&[3u64, 2][..], GgmlType::F32, 6));
    assert_eq!(w.offset % 32, 0);
    assert_eq!(g.dequantize(&bytes, w).unwrap(), [1.0, -2.0, 3.5, 0.0, 1e-3, -7.0]);
    assert_eq!(g.dequantize(&bytes, g.tensor("b").unwrap()).unwrap(), [9.0]);
}

#[test]
fn every_truncation_is_an_error_never_a_panic() {
    let bytes = sample().to_bytes();
    // The last tensor's 4 bytes end before the final padding; every shorter prefix must fail.
    let end = Gguf::parse(&bytes).unwrap().tensor("b").map(|t| t.offset + t.bytes).unwrap();
    for len in 0..end {
        assert!(Gguf::parse(&bytes[..len]).is_err(), "a {len}-byte prefix parsed");
    }
    let err = Gguf::parse(&bytes[..end - 1]).unwrap_err();
    assert!(err.to_string().contains("tensor b"), "{err}");
}

#[test]
fn hostile_headers_are_refused_by_name() {
    let good = sample().to_bytes();
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(Gguf::parse(&bad), Err(GgufError::Magic(_))));
    let mut bad = good.clone();
    bad[4] = 9;
    assert_eq!(Gguf::parse(&bad), Err(GgufError::Version(9)));
    // A key length of 2^60 bytes, and an array claiming more elements than the file has bytes:
    // refused before allocating.
    let mut bad = good.clone();
    bad[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(Gguf::parse(&bad), Err(GgufError::Truncated { .. })));
    let mut w = GgufWriter::default();
    w.meta("a", Value::Array(vec![Value::U8(1)]));
    let mut bad = w.to_bytes();
    let count_at = 24 + 9 + 4 + 4; // header, key "a", value type, element type
    bad[count_at..count_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = Gguf::parse(&bad).unwrap_err();
    assert!(err.to_string().contains("metadata a"), "{err}");
    // A tensor shape that splits a quantisation block, and an unsupported type.
    let mut w = GgufWriter::default();
    w.tensor("q", &[16], GgmlType::Q8_0, vec![0; 34]);
    assert!(Gguf::parse(&w.to_bytes()).unwrap_err().to_string().contains("tensor q"));
    let mut w = GgufWriter::default();
    w.tensor("k", &[256], GgmlType::Q5_K, vec![0; 176]);
    let bytes = w.to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let err = g.dequantize(&bytes, &g.tensors[0]).unwrap_err();
    assert!(err.to_string().contains("Q5_K"), "{err}");
}

/// One block per format, built by hand from its definition (module table), against the formula.
#[test]
fn blocks_decode_by_their_definitions() {
    let d = 0x3800u16.to_le_bytes(); // f16 0.5
    let m = 0xbc00u16.to_le_bytes(); // f16 −1.0
    let nibbles: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
    let q4 = |min: bool| -> Vec<f32> {
        let c = if min { 0 } else { 8 };
        let (lo, hi): (Vec<f32>, Vec<f32>) = (0..16)
            .map(|j| {
                let f = |q: i32| if min { q as f32 * 0.5 - 1.0 } else { (q - c) as f32 * 0.5 };
                (f(j), f(15 - j))
            })
            .unzip();
        [lo, hi].concat()
    };
    let block = [&d[..], &nibbles].concat();
    assert_eq!(dequantize(GgmlType::Q4_0, &block).unwrap(), q4(false));
    let block = [&d[..], &m, &nibbles].concat();
    assert_eq!(dequantize(GgmlType::Q4_1, &block).unwrap(), q4(true));
    // Q5_0: the 5th bit of weight j is bit j of qh; set it for the odd ones.
    let qh: u32 = 0xaaaa_aaaa;
    let block = [&d[..], &qh.to_le_bytes(), &nibbles].concat();
    let want: Vec<f32> = (0..32)
        .map(|j: u32| {
            let nib = if j < 16 { j } else { 15 - (j - 16) };
            ((nib | ((qh >> j) & 1) << 4) as i32 - 16) as f32 * 0.5
        })
        .collect();
    assert_eq!(dequantize(GgmlType::Q5_0, &block).unwrap(), want);
    let qs: Vec<u8> = (0..32).map(|j| (j as i8 * 4 - 64) as u8).collect();
    let block = [&d[..], &qs].concat();
    let want: Vec<f32> = (0..32).map(|j| (j * 4 - 64) as f32 * 0.5).collect();
    assert_eq!(dequantize(GgmlType::Q8_0, &block).unwrap(), want);
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24)); // smallest subnormal
    assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24)); // largest subnormal
    assert_eq!(f16_to_f32(0x7bff), 65504.0);
    assert!(f16_to_f32(0x7c00).is_infinite() && f16_to_f32(0x7e00).is_nan());
}

#[test]
fn f32_to_f16_rounds_to_the_nearest_half_ties_to_even() {
    use super::{f16_to_f32, f32_to_f16};
    // Every finite half comes back as itself.
    for h in 0u16..=0xffff {
        let x = f16_to_f32(h);
        if x.is_finite() {
            assert_eq!(f32_to_f16(x), h, "half {h:#06x} = {x}");
        }
    }
    // Between two neighbouring positive halves: below the midpoint rounds down, above up, and
    // the midpoint itself to the one with an even mantissa.
    for h in 0u16..0x7bff {
        let (lo, hi) = (f16_to_f32(h) as f64, f16_to_f32(h + 1) as f64);
        let mid = ((lo + hi) / 2.0) as f32;
        let even = if h & 1 == 0 { h } else { h + 1 };
        assert_eq!(f32_to_f16(mid), even, "midpoint above {h:#06x}");
        assert_eq!(f32_to_f16(-mid), even | 0x8000);
        assert_eq!(f32_to_f16(f32::from_bits(mid.to_bits() - 1)), h);
        assert_eq!(f32_to_f16(f32::from_bits(mid.to_bits() + 1)), h + 1);
    }
    assert_eq!(f32_to_f16(65520.0), 0x7c00, "rounds up to infinity");
    assert_eq!(f32_to_f16(65519.0), 0x7bff);
    assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
    assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
    assert_eq!(f32_to_f16(1e-9), 0);
}
