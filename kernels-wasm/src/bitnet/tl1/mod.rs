//! TL1: two ternary weights → one 4-bit table index (`3·w0 + w1 + 4`), two indices per byte;
//! the kernel (`qgemm_lut`) looks up each index in its activation pair's table
//! ([`PairTables`]), sums int16 within a BK block and widens to int32 after it.
//!
//! Byte layout, exactly bitnet.cpp's (its converter's `preprocess_weights_tl1`), so its TL1
//! GGUF tensors load as they are. With `by = 256 / bm`, the packed bytes run through
//! `t` (row tile, BM rows) → `kb` (K block, BK columns) → `rb` (bm rows) → `sb` (by columns)
//! → `g` (16 rows) → `h` (2 pairs) → `r` (row), and that byte holds, for row
//! `t·BM + rb·bm + g·16 + r`, the index of pair `kb·BK/2 + sb·by/2 + 2h` in its high nibble and
//! of the next pair in its low nibble. Every 16 consecutive bytes are therefore one "vector":
//! 16 rows × 2 pairs, exactly one 16-entry table lookup per nibble plane.

#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "wasm32")]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::backend::Backend;
use super::blob::Blob;
use super::lut::{pair_index, PairTables};
use super::quant::{check_len, TernaryMatrix};
use super::tiling::{LutFormat, Tile};
use super::BitnetError;
use alloc::vec;

/// Where the 16-byte vectors of the packed matrix are, and what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub m: usize,
    pub k: usize,
    pub tile: Tile,
}

/// One 16-byte vector: rows `row0..row0 + 16`, pair `pair` (high nibbles) and `pair + 1` (low).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vector {
    pub offset: usize,
    pub row0: usize,
    pub pair: usize,
}

impl Geometry {
    pub fn new(m: usize, k: usize, tile: Tile) -> Result<Self, BitnetError> {
        tile.check(LutFormat::Tl1, m, k)?;
        Ok(Geometry { m, k, tile })
    }

    /// Columns per `sb` step.
    pub fn by(&self) -> usize {
        256 / self.tile.bm
    }

    pub fn tiles(&self) -> usize {
        self.m / self.tile.bm_tile
    }

    pub fn k_blocks(&self) -> usize {
        self.k / self.tile.bk
    }

    /// Row blocks (of bm rows) per tile.
    pub fn row_blocks(&self) -> usize {
        self.tile.bm_tile / self.tile.bm
    }

    /// Bytes of one (tile, K block, row block): bm rows × BK columns at 2 bits each.
    pub fn block_bytes(&self) -> usize {
        self.tile.bm * self.tile.bk / 4
    }

    pub fn block_offset(&self, t: usize, kb: usize, rb: usize) -> usize {
        ((t * self.k_blocks() + kb) * self.row_blocks() + rb) * self.block_bytes()
    }

    /// The vectors of one block, in storage order.
    pub fn vectors(&self, t: usize, kb: usize, rb: usize) -> impl Iterator<Item = Vector> + '_ {
        let (bm, bk, by) = (self.tile.bm, self.tile.bk, self.by());
        let base = self.block_offset(t, kb, rb);
        let row_base = t * self.tile.bm_tile + rb * bm;
        (0..bk / by).flat_map(move |sb| {
            (0..bm / 16).flat_map(move |g| {
                (0..by / 4).map(move |h| Vector {
                    offset: base + ((sb * (bm / 16) + g) * (by / 4) + h) * 16,
                    row0: row_base + g * 16,
                    pair: kb * bk / 2 + sb * by / 2 + 2 * h,
                })
            })
        })
    }

    /// The vector of (t, kb, rb) at step `sb`, row group `g`, pair step `h` (what
    /// [`Self::vectors`] yields, for kernels that walk the loops themselves).
    #[inline]
    pub fn vector_offset(&self, block_offset: usize, sb: usize, g: usize, h: usize) -> usize {
        block_offset + ((sb * (self.tile.bm / 16) + g) * (self.by() / 4) + h) * 16
    }

    /// The first pair (high nibbles) of the vectors at (kb, sb, h); the low nibbles hold the next.
    #[inline]
    pub fn pair(&self, kb: usize, sb: usize, h: usize) -> usize {
        kb * self.tile.bk / 2 + sb * self.by() / 2 + 2 * h
    }

    fn all_vectors(&self) -> impl Iterator<Item = Vector> + '_ {
        (0..self.tiles()).flat_map(move |t| {
            (0..self.k_blocks()).flat_map(move |kb| (0..self.row_blocks()).flat_map(move |rb| self.vectors(t, kb, rb)))
        })
    }
}

/// A packed TL1 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Tl1Matrix {
    pub geometry: Geometry,
    /// `M·K/4` bytes in the layout above.
    pub packed: Blob,
    pub scale: f32,
}

impl Tl1Matrix {
    /// Packs with the preset (or chosen) tiles for this shape.
    pub fn pack(t: &TernaryMatrix) -> Result<Self, BitnetError> {
        Self::pack_with(t, Tile::choose(LutFormat::Tl1, t.rows, t.cols)?)
    }

    pub fn pack_with(t: &TernaryMatrix, tile: Tile) -> Result<Self, BitnetError> {
        let geometry = Geometry::new(t.rows, t.cols, tile)?;
        let mut packed = vec![0u8; t.rows * t.cols / 4];
        let idx = |row: usize, pair: usize| pair_index(t.w[row * t.cols + 2 * pair], t.w[row * t.cols + 2 * pair + 1]);
        for v in geometry.all_vectors() {
            for r in 0..16 {
                packed[v.offset + r] = idx(v.row0 + r, v.pair) << 4 | idx(v.row0 + r, v.pair + 1);
            }
        }
        Ok(Tl1Matrix { geometry, packed: packed.into(), scale: t.scale })
    }

    pub fn unpack(&self) -> TernaryMatrix {
        let Geometry { m, k, .. } = self.geometry;
        let mut w = vec![0i8; m * k];
        let mut put = |row: usize, pair: usize, idx: u8| {
            w[row * k + 2 * pair] = (idx / 3) as i8 - 1;
            w[row * k + 2 * pair + 1] = (idx % 3) as i8 - 1;
        };
        for v in self.geometry.all_vectors() {
            for r in 0..16 {
                let byte = self.packed[v.offset + r];
                put(v.row0 + r, v.pair, byte >> 4);
                put(v.row0 + r, v.pair + 1, byte & 15);
            }
        }
        TernaryMatrix { rows: m, cols: k, w, scale: self.scale }
    }

    /// Exact int32 accumulators of the row tiles `tiles` (bitnet.cpp's `CBits`), written to
    /// `acc` (`tiles.len() · BM` values): the part of the work one thread does.
    pub fn gemv_acc_tiles(
        &self,
        tables: &PairTables,
        backend: Backend,
        tiles: core::ops::Range<usize>,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        check_len("TL1 tables", self.geometry.k / 2 * super::lut::PAIR_TABLE_BYTES, tables.bytes.len())?;
        check_len("accumulators", tiles.len() * self.geometry.tile.bm_tile, acc.len())?;
        if tiles.end > self.geometry.tiles() {
            return Err(BitnetError::Length { what: "row tiles", expected: self.geometry.tiles(), got: tiles.end });
        }
        let bm_tile = self.geometry.tile.bm_tile;
        for (i, t) in tiles.enumerate() {
            let out = &mut acc[i * bm_tile..(i + 1) * bm_tile];
            out.fill(0);
            match backend {
                // No vpermb kernel yet: AVX-512 machines run the AVX2 one.
                #[cfg(target_arch = "x86_64")]
                Backend::Avx2 | Backend::Avx512 if backend.is_available() => {
                    // SAFETY: AVX2 was detected (AVX-512 implies it).
                    unsafe { x86::tile_avx2(self, tables, t, out) }
                }
                #[cfg(target_arch = "wasm32")]
                Backend::Simd128 => {
                    // SAFETY: the wasm build assumes simd128 (see Backend::is_available).
                    unsafe { simd128::tile(self, tables, t, out) }
                }
                #[cfg(target_arch = "aarch64")]
                Backend::Neon => neon::tile(self, tables, t, out),
                _ => scalar::tile(self, tables, t, out),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
