//! The LUT formats (TL1, TL2) behind one trait: shape, tiles, tables, and the shared f32
//! epilogue, so the threaded driver and the playground treat them alike.

use super::backend::Backend;
use super::lut::PairTables;
use super::quant::check_len;
use super::tl1::Tl1Matrix;
use super::tl2::{Tl2Matrix, Tl2Tables};
use super::{dequantize_into, BitnetError};
use alloc::vec;
use core::ops::Range;

/// A LUT-format matrix (TL1, TL2): what its kernels, the f32 epilogue and the threaded driver
/// need to know of it.
pub trait LutMatrix: Sync {
    type Tables: Send + Sync;
    /// M, K.
    fn shape(&self) -> (usize, usize);
    /// Rows per tile (BM): the unit of work.
    fn bm_tile(&self) -> usize;
    fn weight_scale(&self) -> f32;
    /// `per_tensor_quant` and `lut_ctor` for one activation row.
    fn tables(&self, x: &[f32]) -> Result<Self::Tables, BitnetError>;
    fn act_scale(tables: &Self::Tables) -> f32;
    fn acc_tiles(&self, t: &Self::Tables, b: Backend, tiles: Range<usize>, acc: &mut [i32]) -> Result<(), BitnetError>;

    /// [`Self::acc_tiles`] for two activation rows: `acc` holds the first row's accumulators,
    /// then the second's. A format whose kernel can share work between the rows overrides it.
    fn acc_tiles2(
        &self,
        t: [&Self::Tables; 2],
        b: Backend,
        tiles: Range<usize>,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        let (first, second) = acc.split_at_mut(acc.len() / 2);
        self.acc_tiles(t[0], b, tiles.clone(), first)?;
        self.acc_tiles(t[1], b, tiles, second)
    }

    /// Exact int32 accumulators of every row.
    fn gemv_acc(&self, t: &Self::Tables, b: Backend, acc: &mut [i32]) -> Result<(), BitnetError> {
        self.acc_tiles(t, b, 0..self.shape().0 / self.bm_tile(), acc)
    }

    /// `y = W·x` for one activation row whose tables are `t`.
    fn gemv(&self, t: &Self::Tables, b: Backend, out: &mut [f32]) -> Result<(), BitnetError> {
        let rows = self.shape().0;
        check_len("outputs", rows, out.len())?;
        let mut acc = vec![0i32; rows];
        self.gemv_acc(t, b, &mut acc)?;
        dequantize_into(out, &acc, Self::act_scale(t), self.weight_scale());
        Ok(())
    }
}

impl LutMatrix for Tl1Matrix {
    type Tables = PairTables;
    fn shape(&self) -> (usize, usize) {
        (self.geometry.m, self.geometry.k)
    }
    fn bm_tile(&self) -> usize {
        self.geometry.tile.bm_tile
    }
    fn weight_scale(&self) -> f32 {
        self.scale
    }
    fn tables(&self, x: &[f32]) -> Result<PairTables, BitnetError> {
        check_len("activations", self.geometry.k, x.len())?;
        PairTables::build(x)
    }
    fn act_scale(tables: &PairTables) -> f32 {
        tables.scale
    }
    fn acc_tiles(&self, t: &PairTables, b: Backend, tiles: Range<usize>, acc: &mut [i32]) -> Result<(), BitnetError> {
        self.gemv_acc_tiles(t, b, tiles, acc)
    }
}

impl LutMatrix for Tl2Matrix {
    type Tables = Tl2Tables;
    fn shape(&self) -> (usize, usize) {
        (self.geometry.m, self.geometry.k)
    }
    fn bm_tile(&self) -> usize {
        self.geometry.tile.bm_tile
    }
    fn weight_scale(&self) -> f32 {
        self.scale
    }
    fn tables(&self, x: &[f32]) -> Result<Tl2Tables, BitnetError> {
        Tl2Matrix::tables(self, x)
    }
    fn act_scale(tables: &Tl2Tables) -> f32 {
        tables.scale
    }
    fn acc_tiles(&self, t: &Tl2Tables, b: Backend, tiles: Range<usize>, acc: &mut [i32]) -> Result<(), BitnetError> {
        self.gemv_acc_tiles(t, b, tiles, acc)
    }
    fn acc_tiles2(
        &self,
        t: [&Tl2Tables; 2],
        b: Backend,
        tiles: Range<usize>,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        self.gemv_acc_tiles2(t, b, tiles, acc)
    }
}
