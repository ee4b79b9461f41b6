//! The portable TL1 kernel: the loop nest of bitnet.cpp's `qgemm_lut`/`tbl_impl`, one lookup
//! at a time. int16 sums per (K block, bm rows) are exact: a block has BK/2 ≤ 128 pairs and
//! each entry is at most 255 in magnitude, 32,640 < 32,767.

use super::{PairTables, Tl1Matrix};

pub fn tile(m: &Tl1Matrix, tables: &PairTables, t: usize, out: &mut [i32]) {
    let g = &m.geometry;
    let row_base = t * g.tile.bm_tile;
    for kb in 0..g.k_blocks() {
        for rb in 0..g.row_blocks() {
            let mut acc16 = [0i16; 64];
            let first = row_base + rb * g.tile.bm;
            for v in g.vectors(t, kb, rb) {
                for r in 0..16 {
                    let byte = m.packed[v.offset + r];
                    let sum = tables.entry(v.pair, byte >> 4) + tables.entry(v.pair + 1, byte & 15);
                    acc16[v.row0 - first + r] += sum;
                }
            }
            for (o, a) in out[rb * g.tile.bm..(rb + 1) * g.tile.bm].iter_mut().zip(acc16) {
                *o += a as i32;
            }
        }
    }
}
