//! TL2: three ternary weights → a 4-bit magnitude `|9·w0 + 3·w1 + w2|` plus a sign bit, so
//! 1.67 bits per weight instead of TL1's 2; looked up in the activation triplet's 14-entry table
//! ([`Tl2Tables`]). K is split: `three_k` (whole BK blocks, BK ∈ {96, 192}) goes through the
//! triplet tables, the rest (`two_k`, a multiple of 32) through TL1-style pair tables.
//!
//! Byte layout, exactly bitnet.cpp's (`preprocess_three_weights_tl2` / `_two_weights_tl2` of its
//! converter; see `FORMATS.md`), three sections one after another:
//! - magnitudes: per (tile `t`, K block `kb`, 32-row block `rb`) `BK/6` vectors of 32 bytes; vector
//!   `sb` holds triplet `kb·BK/3 + 2·sb` in the high nibbles and the next one in the low nibbles,
//!   byte `pos` for row [`row_of`]`(pos)`;
//! - signs: per (t, kb, rb) `BK/24` groups of 32 bytes read as 16 little-endian u16 lanes; bit
//!   `15 − a` of lane `L` is the sign of row `L + 16·(a % 2)`, triplet `kb·BK/3 + 8q + a/2`;
//! - the two-weight tail: per (t, 32-column block, rb) 8 vectors of 32 bytes, pair `2·sb` of
//!   the block in the high nibbles and the next in the low nibbles, rows again by [`row_of`].
//!
//! The row order [`row_of`] (8-row groups 0, 2, 1, 3) is what makes AVX2's in-lane byte unpacks
//! produce rows 0–15 and 16–31 in order.

#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "wasm32")]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::backend::Backend;
use super::blob::Blob;
pub use super::lut::Tl2Tables;
use super::lut::{pair_index, triplet_value, triplet_weights, PAIR_TABLE_BYTES};
use super::quant::{check_len, TernaryMatrix};
use super::tiling::{LutFormat, Tile};
use super::BitnetError;
use alloc::vec;

/// Rows of one block (`bm`, fixed at 32 for TL2) = bytes of one vector.
pub const BM32: usize = 32;
/// Columns of one block of the two-weight tail.
pub const TAIL_BK: usize = 32;

/// The row (within a 32-row block) of byte `pos` of a vector.
#[inline]
pub const fn row_of(pos: usize) -> usize {
    [0, 16, 8, 24][pos / 8] + pos % 8
}

/// Where everything of a packed TL2 matrix is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub m: usize,
    pub k: usize,
    pub tile: Tile,
    pub three_k: usize,
    pub two_k: usize,
}

impl Geometry {
    pub fn new(m: usize, k: usize, tile: Tile) -> Result<Self, BitnetError> {
        tile.check(LutFormat::Tl2, m, k)?;
        let (three_k, two_k) = tile.tl2_split(k);
        Ok(Geometry { m, k, tile, three_k, two_k })
    }

    pub fn tiles(&self) -> usize {
        self.m / self.tile.bm_tile
    }

    /// Blocks of BK columns in `three_k`.
    pub fn k_blocks(&self) -> usize {
        self.three_k / self.tile.bk
    }

    /// Blocks of 32 columns in `two_k`.
    pub fn tail_blocks(&self) -> usize {
        self.two_k / TAIL_BK
    }

    pub fn row_blocks(&self) -> usize {
        self.tile.bm_tile / BM32
    }

    /// Magnitude vectors per (t, kb, rb).
    pub fn vectors_per_block(&self) -> usize {
        self.tile.bk / 6
    }

    pub fn mag_bytes(&self) -> usize {
        self.three_k * self.m / 6
    }

    pub fn sign_bytes(&self) -> usize {
        self.three_k * self.m / 24
    }

    pub fn tail_bytes(&self) -> usize {
        self.two_k * self.m / 4
    }

    pub fn packed_bytes(&self) -> usize {
        self.mag_bytes() + self.sign_bytes() + self.tail_bytes()
    }

    /// The magnitude vector `sb` of (t, kb, rb); its high nibbles are triplet
    /// [`Self::triplet`]`(kb, sb)`, its low nibbles the next one.
    #[inline]
    pub fn mag_offset(&self, t: usize, kb: usize, rb: usize, sb: usize) -> usize {
        (((t * self.k_blocks() + kb) * self.row_blocks() + rb) * self.vectors_per_block() + sb) * 32
    }

    #[inline]
    pub fn triplet(&self, kb: usize, sb: usize) -> usize {
        kb * self.tile.bk / 3 + 2 * sb
    }

    /// The 32 sign bytes of group `q` (triplets `8q..8q + 8` of the block) of (t, kb, rb).
    #[inline]
    pub fn sign_offset(&self, t: usize, kb: usize, rb: usize, q: usize) -> usize {
        self.mag_bytes() + (((t * self.k_blocks() + kb) * self.row_blocks() + rb) * (self.tile.bk / 24) + q) * 32
    }

    /// Tail vector `sb` (0..8) of (t, 32-column block kb, rb): pairs `kb·16 + 2·sb` and the
    /// next, counted from `three_k`.
    #[inline]
    pub fn tail_offset(&self, t: usize, kb: usize, rb: usize, sb: usize) -> usize {
        self.mag_bytes() + self.sign_bytes() + (((t * self.tail_blocks() + kb) * self.row_blocks() + rb) * 8 + sb) * 32
    }

    /// Every (t, kb, rb, first row) of the triplet part, in storage order.
    fn blocks(&self, k_blocks: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
        let (rbs, bm_tile) = (self.row_blocks(), self.tile.bm_tile);
        (0..self.tiles()).flat_map(move |t| {
            (0..k_blocks).flat_map(move |kb| (0..rbs).map(move |rb| (t, kb, rb, t * bm_tile + rb * BM32)))
        })
    }
}

/// A packed TL2 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Tl2Matrix {
    pub geometry: Geometry,
    /// Magnitudes, signs and tail, [`Geometry::packed_bytes`] in all.
    pub packed: Blob,
    pub scale: f32,
}

impl Tl2Matrix {
    pub fn pack(t: &TernaryMatrix) -> Result<Self, BitnetError> {
        Self::pack_with(t, Tile::choose(LutFormat::Tl2, t.rows, t.cols)?)
    }

    pub fn pack_with(t: &TernaryMatrix, tile: Tile) -> Result<Self, BitnetError> {
        let g = Geometry::new(t.rows, t.cols, tile)?;
        let k = t.cols;
        let mut packed = vec![0u8; g.packed_bytes()];
        let value = |row: usize, tr: usize| {
            let c = row * k + 3 * tr;
            triplet_value([t.w[c], t.w[c + 1], t.w[c + 2]])
        };
        for (tt, kb, rb, row0) in g.blocks(g.k_blocks()) {
            for sb in 0..g.vectors_per_block() {
                let (off, tr) = (g.mag_offset(tt, kb, rb, sb), g.triplet(kb, sb));
                for pos in 0..32 {
                    let row = row0 + row_of(pos);
                    packed[off + pos] = value(row, tr).unsigned_abs() << 4 | value(row, tr + 1).unsigned_abs();
                }
            }
            for q in 0..tile.bk / 24 {
                let off = g.sign_offset(tt, kb, rb, q);
                for lane in 0..16 {
                    let mut bits = 0u16;
                    for a in 0..16 {
                        if value(row0 + lane + 16 * (a % 2), g.triplet(kb, 0) + 8 * q + a / 2) < 0 {
                            bits |= 1 << (15 - a);
                        }
                    }
                    packed[off + 2 * lane..off + 2 * lane + 2].copy_from_slice(&bits.to_le_bytes());
                }
            }
        }
        let pair = |row: usize, p: usize| {
            let c = row * k + g.three_k + 2 * p;
            pair_index(t.w[c], t.w[c + 1])
        };
        for (tt, kb, rb, row0) in g.blocks(g.tail_blocks()) {
            for sb in 0..8 {
                let off = g.tail_offset(tt, kb, rb, sb);
                for pos in 0..32 {
                    let (row, p) = (row0 + row_of(pos), kb * 16 + 2 * sb);
                    packed[off + pos] = pair(row, p) << 4 | pair(row, p + 1);
                }
            }
        }
        Ok(Tl2Matrix { geometry: g, packed: packed.into(), scale: t.scale })
    }

    pub fn unpack(&self) -> TernaryMatrix {
        let g = &self.geometry;
        let k = g.k;
        let mut w = vec![0i8; g.m * k];
        for (tt, kb, rb, row0) in g.blocks(g.k_blocks()) {
            for sb in 0..g.vectors_per_block() {
                let (off, tr0) = (g.mag_offset(tt, kb, rb, sb), g.triplet(kb, sb));
                for pos in 0..32 {
                    let row = row0 + row_of(pos);
                    for (tr, mag) in [(tr0, self.packed[off + pos] >> 4), (tr0 + 1, self.packed[off + pos] & 15)] {
                        // The sign of (row, tr): group q = a / 8 of the block, bit a within it.
                        let a = 2 * (tr - g.triplet(kb, 0)) + row_of(pos) / 16;
                        let (lane, q) = (row_of(pos) % 16, a / 16);
                        let s_off = g.sign_offset(tt, kb, rb, q) + 2 * lane;
                        let bits = u16::from_le_bytes([self.packed[s_off], self.packed[s_off + 1]]);
                        let negative = bits >> (15 - a % 16) & 1 == 1;
                        let v = if negative { -(mag as i8) } else { mag as i8 };
                        w[row * k + 3 * tr..row * k + 3 * tr + 3].copy_from_slice(&triplet_weights(v));
                    }
                }
            }
        }
        for (tt, kb, rb, row0) in g.blocks(g.tail_blocks()) {
            for sb in 0..8 {
                let off = g.tail_offset(tt, kb, rb, sb);
                for pos in 0..32 {
                    let (row, p) = (row0 + row_of(pos), kb * 16 + 2 * sb);
                    for (p, idx) in [(p, self.packed[off + pos] >> 4), (p + 1, self.packed[off + pos] & 15)] {
                        let c = row * k + g.three_k + 2 * p;
                        w[c] = (idx / 3) as i8 - 1;
                        w[c + 1] = (idx % 3) as i8 - 1;
                    }
                }
            }
        }
        TernaryMatrix { rows: g.m, cols: k, w, scale: self.scale }
    }

    /// Exact int32 accumulators of the row tiles `tiles` into `acc` (`tiles.len() · BM`).
    pub fn gemv_acc_tiles(
        &self,
        tables: &Tl2Tables,
        backend: Backend,
        tiles: core::ops::Range<usize>,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        self.check_tiles(tables, &tiles)?;
        check_len("accumulators", tiles.len() * self.geometry.tile.bm_tile, acc.len())?;
        let bm_tile = self.geometry.tile.bm_tile;
        for (i, t) in tiles.enumerate() {
            let out = &mut acc[i * bm_tile..(i + 1) * bm_tile];
            out.fill(0);
            match backend {
                #[cfg(target_arch = "x86_64")]
                Backend::Avx512 if backend.is_available() => {
                    // SAFETY: AVX-512 BW/VBMI were detected; sizes were checked above.
                    unsafe { x86::tile_avx512(self, tables, t, out) }
                }
                #[cfg(target_arch = "x86_64")]
                Backend::Avx2 if backend.is_available() => {
                    // SAFETY: AVX2 was detected; sizes were checked above.
                    unsafe { x86::tile_avx2(self, tables, t, out) }
                }
                #[cfg(target_arch = "wasm32")]
                Backend::Simd128 => {
                    // SAFETY: the wasm build assumes simd128; sizes were checked above.
                    unsafe { simd128::tile(self, tables, t, out) }
                }
                #[cfg(target_arch = "aarch64")]
                Backend::Neon => neon::tile(self, tables, t, out),
                _ => scalar::tile(self, tables, t, out),
            }
        }
        Ok(())
    }

    /// That `tables` were built for this matrix's K and split, and `tiles` are its own.
    fn check_tiles(&self, tables: &Tl2Tables, tiles: &core::ops::Range<usize>) -> Result<(), BitnetError> {
        let g = &self.geometry;
        check_len("TL2 triplet tables", g.three_k / 3 * PAIR_TABLE_BYTES, tables.three.len())?;
        check_len("TL2 pair tables", g.two_k / 2 * PAIR_TABLE_BYTES, tables.two.len())?;
        if tiles.end > g.tiles() {
            return Err(BitnetError::Length { what: "row tiles", expected: g.tiles(), got: tiles.end });
        }
        Ok(())
    }

    /// [`Self::gemv_acc_tiles`] for two activation rows' tables: `acc` holds the first row's
    /// accumulators, then the second's. On AVX2 each weight vector is decoded once for both.
    pub fn gemv_acc_tiles2(
        &self,
        tables: [&Tl2Tables; 2],
        backend: Backend,
        tiles: core::ops::Range<usize>,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        let g = &self.geometry;
        let half = tiles.len() * g.tile.bm_tile;
        check_len("accumulators (two rows)", 2 * half, acc.len())?;
        let (a, b) = acc.split_at_mut(half);
        #[cfg(target_arch = "x86_64")]
        if backend == Backend::Avx2 && backend.is_available() {
            for t in tables {
                self.check_tiles(t, &tiles)?;
            }
            let bm_tile = g.tile.bm_tile;
            for (i, t) in tiles.enumerate() {
                let out = [&mut a[i * bm_tile..(i + 1) * bm_tile], &mut b[i * bm_tile..(i + 1) * bm_tile]];
                out[0].fill(0);
                out[1].fill(0);
                // SAFETY: AVX2 was detected; sizes were checked above.
                unsafe { x86::tile2_avx2(self, tables, t, out) }
            }
            return Ok(());
        }
        self.gemv_acc_tiles(tables[0], backend, tiles.clone(), a)?;
        self.gemv_acc_tiles(tables[1], backend, tiles, b)
    }

    /// The tables of one activation row for this matrix.
    pub fn tables(&self, x: &[f32]) -> Result<Tl2Tables, BitnetError> {
        check_len("activations", self.geometry.k, x.len())?;
        Tl2Tables::build(x, self.geometry.three_k)
    }
}

#[cfg(test)]
mod tests;
