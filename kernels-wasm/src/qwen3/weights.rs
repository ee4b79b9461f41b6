//! How the matrices are stored in the kernel: the seed's Q24 words, and its two research
//! variants (FACTS §1), each defined here so the golden model computes exactly what the BPF
//! program computes.
//!
//! - `q24`: one s32 per weight (4 bytes).
//! - `bf16-table`: one BF16 per weight (2 bytes) and a 65,536-entry BF16 → Q24 table the program
//!   looks each weight up in. For weights that came from BF16 (HF checkpoints) the table gives
//!   back exactly their Q24 value, so the logits are byte-identical to `q24`'s.
//! - `int4-g128`: per row, groups of up to 128 weights share a Q24 scale `s = max|w| / 7`; each
//!   weight is `q ∈ [−7, 7]` in a nibble (0.53 bytes per weight with the scales). The program sums
//!   `x·q` per group and multiplies by `s` once per group; in wrapping 64-bit integers that equals
//!   the Q24 product with weights `q·s`, which is what the golden model uses.

use alloc::vec::Vec;

/// Weights per INT4 group.
pub const GROUP: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightFormat {
    #[default]
    Q24,
    Bf16Table,
    Int4G128,
}

impl WeightFormat {
    pub const ALL: [WeightFormat; 3] = [WeightFormat::Q24, WeightFormat::Bf16Table, WeightFormat::Int4G128];

    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Q24 => "q24",
            WeightFormat::Bf16Table => "bf16-table",
            WeightFormat::Int4G128 => "int4-g128",
        }
    }

    pub fn named(name: &str) -> Option<WeightFormat> {
        WeightFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Bytes one row of `cols` weights takes in the kernel's map (8-byte aligned, as array maps
    /// space their values).
    pub fn row_bytes(self, cols: usize) -> usize {
        let raw = match self {
            WeightFormat::Q24 => 4 * cols,
            WeightFormat::Bf16Table => 2 * cols,
            // Whole groups of nibbles, so the program's index never needs the row's tail.
            WeightFormat::Int4G128 => (4 + GROUP / 2) * cols.div_ceil(GROUP),
        };
        raw.next_multiple_of(8)
    }

    /// The Q24 weights the golden model multiplies by so that it computes what the program
    /// computes with this storage.
    pub fn effective_row(self, row: &[i32]) -> Vec<i32> {
        match self {
            WeightFormat::Q24 => row.to_vec(),
            WeightFormat::Bf16Table => row.iter().map(|&w| bf16_to_q24(q24_to_bf16(w))).collect(),
            WeightFormat::Int4G128 => {
                let mut out = Vec::with_capacity(row.len());
                for group in row.chunks(GROUP) {
                    let (scale, qs) = int4_group(group);
                    out.extend(qs.iter().map(|&q| q as i32 * scale));
                }
                out
            }
        }
    }

    /// One row as the kernel stores it (`row_bytes` long).
    pub fn encode_row(self, row: &[i32], out: &mut [u8]) {
        match self {
            WeightFormat::Q24 => {
                for (o, w) in out.chunks_exact_mut(4).zip(row) {
                    o.copy_from_slice(&w.to_le_bytes());
                }
            }
            WeightFormat::Bf16Table => {
                for (o, &w) in out.chunks_exact_mut(2).zip(row) {
                    o.copy_from_slice(&q24_to_bf16(w).to_le_bytes());
                }
            }
            WeightFormat::Int4G128 => {
                // Layout: all group scales (s32), then 64 bytes of nibbles per group, two weights
                // per byte, the even column in the low nibble, two's complement.
                let groups = row.len().div_ceil(GROUP);
                let (scales, nibbles) = out.split_at_mut(4 * groups);
                for (g, group) in row.chunks(GROUP).enumerate() {
                    let (scale, qs) = int4_group(group);
                    scales[4 * g..4 * g + 4].copy_from_slice(&scale.to_le_bytes());
                    for (j, &q) in qs.iter().enumerate() {
                        let nib = (q as u8) & 0xf;
                        nibbles[g * GROUP / 2 + j / 2] |= if j % 2 == 0 { nib } else { nib << 4 };
                    }
                }
            }
        }
    }
}

/// The BF16 nearest to a Q24 value (ties to even).
pub fn q24_to_bf16(w: i32) -> u16 {
    let f = w as f32 / 16_777_216.0; // exact: |w| < 2^31 has ≤ 24 significant bits after rounding
    let b = f.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// A BF16's Q24 value as the seed converts (round half away from zero); 0 for NaN and for
/// values beyond Q24's range (no finite BF16 from a Q24 weight is either).
pub fn bf16_to_q24(h: u16) -> i32 {
    let f = f32::from_bits((h as u32) << 16) as f64;
    super::fixed::to_fixed(f, super::fixed::Q_W, 0).unwrap_or(0)
}

/// The 65,536-entry BF16 → Q24 table the `bf16-table` program reads.
pub fn bf16_table() -> Vec<i32> {
    (0..=u16::MAX).map(bf16_to_q24).collect()
}

/// A group's Q24 scale `round(max|w| / 7)` and its codes `round(w / scale)` in [−7, 7] (ties
/// away from zero, in integers).
pub fn int4_group(group: &[i32]) -> (i32, Vec<i8>) {
    let max = group.iter().map(|w| w.unsigned_abs() as i64).max().unwrap_or(0);
    let scale = ((max + 3) / 7) as i32;
    let qs = group
        .iter()
        .map(|&w| {
            if scale == 0 {
                return 0;
            }
            let (w, s) = (w as i64, scale as i64);
            let q = (2 * w.abs() + s) / (2 * s); // round half away from zero of |w| / s
            (q.min(7) * w.signum()) as i8
        })
        .collect();
    (scale, qs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn bf16_weights_survive_the_table_exactly() {
        // Weights that came from BF16 (as HF checkpoints store them) map back to the same Q24
        // word: the seed's "byte-identical logits".
        let table = bf16_table();
        let mut rng = Rng::new(3);
        for v in rng.f32s(10_000, 0.5).into_iter().chain([0.0, -1e-9, 3e-6, 1.5, -127.0]) {
            let bf = (v.to_bits() >> 16) as u16; // truncate to a BF16 value
            let q24 = crate::qwen3::fixed::to_fixed(f32::from_bits((bf as u32) << 16) as f64, 24, 0).unwrap();
            // (Below Q24's resolution a BF16 becomes 0, and 0 round-trips.)
            assert_eq!(table[q24_to_bf16(q24) as usize], q24, "{v}");
            assert_eq!(table[bf as usize], q24, "{v}");
            assert_eq!(WeightFormat::Bf16Table.effective_row(&[q24]), [q24]);
        }
    }

    #[test]
    fn int4_groups_round_to_seven_steps_of_the_scale() {
        let mut rng = Rng::new(4);
        let row: Vec<i32> = rng.f32s(300, 1.0).iter().map(|v| (v * 16_777_216.0) as i32).collect();
        let eff = WeightFormat::Int4G128.effective_row(&row);
        for (g, (group, e)) in row.chunks(GROUP).zip(eff.chunks(GROUP)).enumerate() {
            let (scale, qs) = int4_group(group);
            let max = group.iter().map(|w| w.abs()).max().unwrap();
            assert!((scale as i64 * 7 - max as i64).abs() <= 7, "group {g}");
            for ((&w, &q), &e) in group.iter().zip(&qs).zip(e) {
                assert!((-7..=7).contains(&q));
                assert_eq!(e, q as i32 * scale);
                // Round to nearest: within half a step, except where the code saturates at ±7.
                assert!((w - e).abs() <= scale / 2 + 1 || q.abs() == 7, "w {w} → {e}, scale {scale}");
            }
        }
        // The packed row decodes to the same codes: scales first, then two nibbles per byte.
        let mut packed = vec![0u8; WeightFormat::Int4G128.row_bytes(row.len())];
        WeightFormat::Int4G128.encode_row(&row, &mut packed);
        let groups = row.len().div_ceil(GROUP);
        for (c, &e) in eff.iter().enumerate() {
            let g = c / GROUP;
            let scale = i32::from_le_bytes(packed[4 * g..4 * g + 4].try_into().unwrap());
            let byte = packed[4 * groups + g * GROUP / 2 + (c % GROUP) / 2];
            let q = (((if c % 2 == 0 { byte << 4 } else { byte }) as i8) >> 4) as i32;
            assert_eq!(q * scale, e, "column {c}");
        }
        assert_eq!(WeightFormat::Int4G128.row_bytes(300), 3 * 68 + 4); // scales, 3 groups of nibbles, to 8
    }
}
