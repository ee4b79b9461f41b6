//! bitnet.cpp's threading of one mul_mat: thread 0 prepares what every thread reads (the
//! quantised activations, or the lookup tables) into shared memory, a barrier when there is more
//! than one thread, then each thread computes its own contiguous share of the output rows.

use super::backend::Backend;
use super::i2s::I2sMatrix;
use super::lut::PairTables;
use super::quant::{check_len, quantize_activations, Rounding};
use super::tl1::Tl1Matrix;
use super::{dequantize_into, BitnetError};
use std::sync::{Barrier, OnceLock};

/// Runs `work(prepared, first_unit, out_chunk)` on `threads` threads over `out`, which is cut
/// into whole units of `unit` values. Thread 0 (the caller) runs `prepare` first.
fn split<P: Send + Sync, T: Send>(
    threads: usize,
    unit: usize,
    out: &mut [T],
    prepare: impl FnOnce() -> Result<P, BitnetError> + Send,
    work: impl Fn(&P, usize, &mut [T]) -> Result<(), BitnetError> + Sync,
) -> Result<(), BitnetError> {
    let units = out.len() / unit;
    let threads = threads.clamp(1, units.max(1));
    let per = units.div_ceil(threads);
    let shared: OnceLock<Result<P, BitnetError>> = OnceLock::new();
    let barrier = Barrier::new(threads);
    let mut chunks = out.chunks_mut(per * unit).enumerate();
    let first = chunks.next();
    std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .map(|(i, chunk)| {
                let (shared, barrier, work) = (&shared, &barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    match shared.get() {
                        Some(Ok(p)) => work(p, i * per, chunk),
                        _ => Ok(()), // thread 0 reports the failure
                    }
                })
            })
            .collect();
        let _ = shared.set(prepare());
        if threads > 1 {
            barrier.wait();
        }
        let mut result = match (shared.get(), first) {
            (Some(Ok(p)), Some((_, chunk))) => work(p, 0, chunk),
            (Some(Err(e)), _) => Err(e.clone()),
            _ => Ok(()),
        };
        for h in handles {
            let r = h.join().unwrap_or(Err(BitnetError::Length { what: "worker thread", expected: 0, got: 1 }));
            result = result.and(r);
        }
        result
    })
}

/// `y = W·x` with I2_S on `threads` threads: thread 0 quantises `x`.
pub fn i2s_gemv(
    m: &I2sMatrix,
    x: &[f32],
    backend: Backend,
    threads: usize,
    out: &mut [f32],
) -> Result<(), BitnetError> {
    check_len("outputs", m.rows, out.len())?;
    split(
        threads,
        1,
        out,
        || quantize_activations(x, Rounding::HalfEven),
        |acts, first_row, chunk| {
            let mut acc = vec![0i32; chunk.len()];
            m.gemv_acc_rows(&acts.q, backend, first_row, &mut acc)?;
            dequantize_into(chunk, &acc, acts.scale, m.scale);
            Ok(())
        },
    )
}

/// `y = W·x` with TL1 on `threads` threads: thread 0 builds the tables, threads take row tiles.
pub fn tl1_gemv(
    m: &Tl1Matrix,
    x: &[f32],
    backend: Backend,
    threads: usize,
    out: &mut [f32],
) -> Result<(), BitnetError> {
    check_len("outputs", m.geometry.m, out.len())?;
    let bm_tile = m.geometry.tile.bm_tile;
    split(
        threads,
        bm_tile,
        out,
        || PairTables::build(x),
        |tables, first_tile, chunk| {
            let mut acc = vec![0i32; chunk.len()];
            m.gemv_acc_tiles(tables, backend, first_tile..first_tile + chunk.len() / bm_tile, &mut acc)?;
            dequantize_into(chunk, &acc, tables.scale, m.scale);
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::i2s::I2sLayout;
    use crate::bitnet::testutil::Rng;

    #[test]
    fn every_thread_count_gives_identical_outputs() {
        let mut rng = Rng::new(21);
        for (m, k) in [(768, 768), (256, 4096), (96, 192)] {
            let t = rng.ternary(m, k);
            let x = rng.f32s(k, 4.0);
            let i2s = I2sMatrix::pack(&t, I2sLayout::X86).ok();
            let tl1 = Tl1Matrix::pack(&t).unwrap();
            let mut reference = (vec![0f32; m], vec![0f32; m]);
            if let Some(p) = &i2s {
                i2s_gemv(p, &x, Backend::Scalar, 1, &mut reference.0).unwrap();
            }
            tl1_gemv(&tl1, &x, Backend::Scalar, 1, &mut reference.1).unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for threads in 1..=5 {
                for backend in Backend::available() {
                    let mut y = vec![0f32; m];
                    if let Some(p) = &i2s {
                        i2s_gemv(p, &x, backend, threads, &mut y).unwrap();
                        assert_eq!(bits(&y), bits(&reference.0), "I2_S {m}x{k} {backend:?} x{threads}");
                    }
                    tl1_gemv(&tl1, &x, backend, threads, &mut y).unwrap();
                    assert_eq!(bits(&y), bits(&reference.1), "TL1 {m}x{k} {backend:?} x{threads}");
                }
            }
        }
    }

    #[test]
    fn a_failing_preparation_is_reported_once() {
        let t = Rng::new(22).ternary(64, 128);
        let p = Tl1Matrix::pack(&t).unwrap();
        let mut x = vec![1.0f32; 128];
        x[5] = f32::NAN;
        let err = tl1_gemv(&p, &x, Backend::Scalar, 3, &mut [0.0; 64]).unwrap_err();
        assert_eq!(err, BitnetError::NonFinite { what: "activations", index: 5 });
    }
}
