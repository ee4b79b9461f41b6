//! bitnet.cpp's threading of one mul_mat: thread 0 prepares what every thread reads (the
//! quantised activations, or the lookup tables of every activation row) into shared memory, a
//! barrier when there is more than one thread, then each thread computes its own contiguous share
//! of the outputs. Here the barrier is the hand-over to the [`Pool`]: its workers start on the
//! job only once thread 0 has finished preparing it.
//!
//! GEMV is GEMM with one activation row. Outputs are row-major `n × M` (`n` activation rows);
//! the work units are row tiles (LUT formats) or single outputs (I2_S), numbered across the
//! activation rows, so every thread's share is one contiguous slice of the output.

use super::backend::Backend;
use super::i2s::I2sMatrix;
pub use super::lut_matrix::LutMatrix;
use super::pool::Pool;
use super::quant::{check_len, quantize_activations, Rounding};
use super::{dequantize_into, BitnetError};
use std::sync::Mutex;

/// Runs `work(prepared, first_unit, out_chunk)` on every thread of `pool` over `out`, cut into
/// contiguous shares of whole units of `unit` values, after thread 0 has run `prepare`.
pub(crate) fn split<P: Sync, T: Send>(
    pool: &Pool,
    unit: usize,
    out: &mut [T],
    prepare: impl FnOnce() -> Result<P, BitnetError>,
    work: impl Fn(&P, usize, &mut [T]) -> Result<(), BitnetError> + Sync,
) -> Result<(), BitnetError> {
    let prepared = prepare()?;
    let units = out.len() / unit;
    let per = units.div_ceil(pool.threads()).max(1);
    // Each thread takes its own chunk out of a slot; the first error wins.
    let chunks: Vec<Mutex<Option<&mut [T]>>> = out.chunks_mut(per * unit).map(|c| Mutex::new(Some(c))).collect();
    let result: Mutex<Result<(), BitnetError>> = Mutex::new(Ok(()));
    let panicked = pool.run(&|i| {
        let chunk = chunks.get(i).and_then(|c| c.lock().ok()?.take());
        if let Some(chunk) = chunk {
            if let Err(e) = work(&prepared, i * per, chunk) {
                if let Ok(mut r) = result.lock() {
                    *r = r.clone().and(Err(e));
                }
            }
        }
    });
    if panicked.is_err() {
        return Err(BitnetError::WorkerPanicked);
    }
    result.into_inner().unwrap_or(Ok(()))
}

/// `Y = X·Wᵀ` for `n` activation rows `xs` (`n × K`) into `out` (`n × M`), TL1 or TL2.
pub fn lut_gemm<L: LutMatrix>(
    m: &L,
    xs: &[f32],
    backend: Backend,
    pool: &Pool,
    out: &mut [f32],
) -> Result<(), BitnetError> {
    let ((rows, k), bm_tile) = (m.shape(), m.bm_tile());
    let n = out.len() / rows;
    check_len("outputs (a whole number of rows)", n * rows, out.len())?;
    check_len("activations (n rows of K)", n * k, xs.len())?;
    let tiles = rows / bm_tile;
    split(
        pool,
        bm_tile,
        out,
        || xs.chunks_exact(k).map(|x| m.tables(x)).collect::<Result<Vec<_>, _>>(),
        |tables, first, chunk| {
            let mut acc = vec![0i32; chunk.len()];
            // Consecutive units of one activation row run as one tile range.
            let mut done = 0;
            while done < chunk.len() {
                let unit = first + done / bm_tile;
                let (row, tile) = (unit / tiles, unit % tiles);
                let count = (tiles - tile).min((chunk.len() - done) / bm_tile);
                let span = done..done + count * bm_tile;
                m.acc_tiles(&tables[row], backend, tile..tile + count, &mut acc[span.clone()])?;
                dequantize_into(&mut chunk[span.clone()], &acc[span], L::act_scale(&tables[row]), m.weight_scale());
                done += count * bm_tile;
            }
            Ok(())
        },
    )
}

/// `y = W·x`, TL1 or TL2.
pub fn lut_gemv<L: LutMatrix>(
    m: &L,
    x: &[f32],
    backend: Backend,
    pool: &Pool,
    out: &mut [f32],
) -> Result<(), BitnetError> {
    check_len("outputs", m.shape().0, out.len())?;
    lut_gemm(m, x, backend, pool, out)
}

/// `Y = X·Wᵀ` with I2_S for `n` activation rows: thread 0 quantises every row.
pub fn i2s_gemm(m: &I2sMatrix, xs: &[f32], backend: Backend, pool: &Pool, out: &mut [f32]) -> Result<(), BitnetError> {
    let n = out.len() / m.rows;
    check_len("outputs (a whole number of rows)", n * m.rows, out.len())?;
    check_len("activations (n rows of K)", n * m.cols, xs.len())?;
    split(
        pool,
        1,
        out,
        || xs.chunks_exact(m.cols).map(|x| quantize_activations(x, Rounding::HalfEven)).collect::<Result<Vec<_>, _>>(),
        |acts, first, chunk| {
            let mut done = 0;
            while done < chunk.len() {
                let (row, r) = ((first + done) / m.rows, (first + done) % m.rows);
                let count = (m.rows - r).min(chunk.len() - done);
                let mut acc = vec![0i32; count];
                m.gemv_acc_rows(&acts[row].q, backend, r, &mut acc)?;
                dequantize_into(&mut chunk[done..done + count], &acc, acts[row].scale, m.scale);
                done += count;
            }
            Ok(())
        },
    )
}

/// `y = W·x` with I2_S.
pub fn i2s_gemv(m: &I2sMatrix, x: &[f32], backend: Backend, pool: &Pool, out: &mut [f32]) -> Result<(), BitnetError> {
    check_len("outputs", m.rows, out.len())?;
    i2s_gemm(m, x, backend, pool, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::i2s::I2sLayout;
    use crate::bitnet::lut::PairTables;
    use crate::bitnet::testutil::Rng;
    use crate::bitnet::tl1::Tl1Matrix;
    use crate::bitnet::tl2::{Tl2Matrix, Tl2Tables};

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// Every backend, thread count and batch size gives the bits of one scalar GEMV per row.
    #[test]
    fn every_thread_count_and_batch_gives_identical_outputs() {
        let mut rng = Rng::new(21);
        let pools: Vec<Pool> = (1..=4).map(|n| Pool::new(n).unwrap()).collect();
        for (m, k) in [(768, 768), (256, 4096), (96, 192), (160, 416)] {
            let t = rng.ternary(m, k);
            let n = 3;
            let xs = rng.f32s(n * k, 4.0);
            let i2s = I2sMatrix::pack(&t, I2sLayout::X86).ok();
            let tl1 = Tl1Matrix::pack(&t).unwrap();
            let tl2 = Tl2Matrix::pack(&t).ok();
            // The reference: row by row, scalar, one thread, through the single-row kernels.
            let mut reference = [vec![0f32; n * m], vec![0f32; n * m], vec![0f32; n * m]];
            for (i, x) in xs.chunks_exact(k).enumerate() {
                let y = i * m..(i + 1) * m;
                if let Some(p) = &i2s {
                    let acts = quantize_activations(x, Rounding::HalfEven).unwrap();
                    p.gemv(&acts, Backend::Scalar, &mut reference[0][y.clone()]).unwrap();
                }
                tl1.gemv(&PairTables::build(x).unwrap(), Backend::Scalar, &mut reference[1][y.clone()]).unwrap();
                if let Some(p) = &tl2 {
                    p.gemv(&p.tables(x).unwrap(), Backend::Scalar, &mut reference[2][y]).unwrap();
                }
            }
            for pool in &pools {
                for backend in Backend::available() {
                    let ctx = format!("{m}x{k} {backend:?} x{}", pool.threads());
                    for rows in [1, n] {
                        let (x, len) = (&xs[..rows * k], rows * m);
                        let mut y = vec![0f32; len];
                        if let Some(p) = &i2s {
                            i2s_gemm(p, x, backend, pool, &mut y).unwrap();
                            assert_eq!(bits(&y), bits(&reference[0][..len]), "I2_S {ctx} n={rows}");
                        }
                        lut_gemm(&tl1, x, backend, pool, &mut y).unwrap();
                        assert_eq!(bits(&y), bits(&reference[1][..len]), "TL1 {ctx} n={rows}");
                        if let Some(p) = &tl2 {
                            lut_gemm(p, x, backend, pool, &mut y).unwrap();
                            assert_eq!(bits(&y), bits(&reference[2][..len]), "TL2 {ctx} n={rows}");
                        }
                    }
                }
            }
        }
    }

    /// Every BM/BK/bm combination of bitnet.cpp's presets, on a matrix of two row tiles and two K
    /// blocks (plus a 32-column TL2 tail): every backend equals the plain dot product.
    #[test]
    fn every_preset_tile_computes_exactly() {
        use crate::bitnet::testutil::plain_dot;
        use crate::bitnet::tiling::{presets, LutFormat};
        let mut rng = Rng::new(23);
        for (format, pm, pk, tile) in presets() {
            let tail = if format == LutFormat::Tl2 { 32 } else { 0 };
            let (m, k) = (2 * tile.bm_tile, 2 * tile.bk + tail);
            let t = rng.ternary(m, k);
            let q: Vec<i8> = rng.acts(k).into_iter().map(|v| v.max(-127)).collect();
            let expected = plain_dot(&t, &q);
            let acts = crate::bitnet::quant::QuantActs { q: q.clone(), scale: 1.0 };
            for backend in Backend::available() {
                let mut acc = vec![0; m];
                match format {
                    LutFormat::Tl1 => {
                        let p = Tl1Matrix::pack_with(&t, tile).unwrap();
                        p.gemv_acc(&PairTables::from_quantized(&acts).unwrap(), backend, &mut acc).unwrap();
                    }
                    LutFormat::Tl2 => {
                        let p = Tl2Matrix::pack_with(&t, tile).unwrap();
                        let tables = Tl2Tables::from_quantized(&acts, p.geometry.three_k).unwrap();
                        p.gemv_acc(&tables, backend, &mut acc).unwrap();
                    }
                }
                assert_eq!(acc, expected, "{} preset of {pm}x{pk} {tile:?} on {backend:?}", format.name());
            }
        }
    }

    #[test]
    fn bad_inputs_are_reported_once() {
        let pool = Pool::new(3).unwrap();
        let t = Rng::new(22).ternary(64, 128);
        let p = Tl1Matrix::pack(&t).unwrap();
        let mut x = vec![1.0f32; 256];
        x[128 + 5] = f32::NAN;
        let err = lut_gemm(&p, &x, Backend::Scalar, &pool, &mut [0.0; 128]).unwrap_err();
        assert_eq!(err, BitnetError::NonFinite { what: "activations", index: 5 });
        let err = lut_gemm(&p, &x[..200], Backend::Scalar, &pool, &mut [0.0; 128]).unwrap_err();
        assert!(matches!(err, BitnetError::Length { expected: 256, got: 200, .. }), "{err}");
        assert!(lut_gemv(&p, &x[..128], Backend::Scalar, &pool, &mut [0.0; 100]).is_err());
        let q = I2sMatrix::pack(&Rng::new(22).ternary(8, 128), I2sLayout::X86).unwrap();
        assert!(i2s_gemm(&q, &x[..128], Backend::Scalar, &pool, &mut [0.0; 9]).is_err());
    }
}
