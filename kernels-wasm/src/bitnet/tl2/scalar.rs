//! The portable TL2 kernel, one lookup at a time. int16 block sums are exact: a BK ≤ 192 block
//! has ≤ 64 triplets of |entry| ≤ 384 (24,576), a 32-column tail block 16 pairs of ≤ 256.

use super::{row_of, Tl2Matrix, Tl2Tables, BM32};

pub fn tile(m: &Tl2Matrix, tables: &Tl2Tables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    for rb in 0..g.row_blocks() {
        let dst = &mut out[rb * BM32..(rb + 1) * BM32];
        for kb in 0..g.k_blocks() {
            let mut acc16 = [0i16; BM32];
            for sb in 0..g.vectors_per_block() {
                let (off, tr) = (g.mag_offset(t, kb, rb, sb), g.triplet(kb, sb));
                let signs = &m.packed[g.sign_offset(t, kb, rb, sb / 4)..][..32];
                // Sign bits of this vector's two triplets: 15 − 4j for rows 0–15 (high nibble),
                // 14 − 4j rows 16–31 (high), 13 − 4j and 12 − 4j for the low nibble.
                let top = 4 * (sb % 4);
                for pos in 0..32 {
                    let row = row_of(pos);
                    let lane = u16::from_le_bytes([signs[2 * (row % 16)], signs[2 * (row % 16) + 1]]);
                    let sign = |a: usize| lane >> (15 - a) & 1 == 1;
                    let byte = m.packed[off + pos];
                    let hi = tables.triplet_entry(tr, byte >> 4);
                    let lo = tables.triplet_entry(tr + 1, byte & 15);
                    let hi = if sign(top + row / 16) { -hi } else { hi };
                    let lo = if sign(top + 2 + row / 16) { -lo } else { lo };
                    acc16[row] += hi + lo;
                }
            }
            dst.iter_mut().zip(acc16).for_each(|(o, a)| *o += a as i32);
        }
        for kb in 0..g.tail_blocks() {
            let mut acc16 = [0i16; BM32];
            for sb in 0..8 {
                let (off, p) = (g.tail_offset(t, kb, rb, sb), kb * 16 + 2 * sb);
                for pos in 0..32 {
                    let byte = m.packed[off + pos];
                    acc16[row_of(pos)] += tables.pair_entry(p, byte >> 4) + tables.pair_entry(p + 1, byte & 15);
                }
            }
            dst.iter_mut().zip(acc16).for_each(|(o, a)| *o += a as i32);
        }
    }
}
