//! How a layer's work is shared out: on one thread (`no_std`, wasm, microcontrollers) or on the
//! persistent [`crate::bitnet::pool::Pool`], each thread one contiguous share.

use crate::bitnet::BitnetError;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::ops::Range;

/// One thread's part: `(first_unit, chunk)`.
pub type Work<'a> = dyn Fn(usize, &mut [f32]) -> Result<(), BitnetError> + Sync + 'a;

/// One thread's units.
pub type RangeWork<'a> = dyn Fn(Range<usize>) -> Result<(), BitnetError> + Sync + 'a;

/// Work on contiguous chunks of an output.
pub trait Parallel: Sync {
    fn threads(&self) -> usize;
    /// Calls `work(first_unit, chunk)` for contiguous chunks of `out`, each a whole number of
    /// units of `unit` values, together covering `out`; the first error wins.
    fn split(&self, out: &mut [f32], unit: usize, work: &Work) -> Result<(), BitnetError>;
    /// Calls `work(range)` for contiguous, disjoint ranges of `0..units` that together cover
    /// it, each thread taking one or more of them; the first error wins (and stops the rest).
    fn ranges(&self, units: usize, work: &RangeWork) -> Result<(), BitnetError>;
    /// A hint: the next job reads `spans` (in this order, in equal parts per thread), and the
    /// caller works alone until then. The pool's idle workers prefetch them
    /// ([`crate::bitnet::pool::warm`]); elsewhere it does nothing. Never changes a result.
    fn warm(&self, _spans: &[&[u8]]) {}
}

/// Everything on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl Parallel for Single {
    fn threads(&self) -> usize {
        1
    }

    fn split(&self, out: &mut [f32], _unit: usize, work: &Work) -> Result<(), BitnetError> {
        work(0, out)
    }

    fn ranges(&self, units: usize, work: &RangeWork) -> Result<(), BitnetError> {
        work(0..units)
    }
}

#[cfg(feature = "std")]
impl Parallel for crate::bitnet::pool::Pool {
    fn threads(&self) -> usize {
        crate::bitnet::pool::Pool::threads(self)
    }

    fn split(&self, out: &mut [f32], unit: usize, work: &Work) -> Result<(), BitnetError> {
        crate::bitnet::threads::split(self, unit, out, || Ok(()), |_, first, chunk| work(first, chunk))
    }

    fn warm(&self, spans: &[&[u8]]) {
        crate::bitnet::pool::Pool::warm(self, spans)
    }

    fn ranges(&self, units: usize, work: &RangeWork) -> Result<(), BitnetError> {
        // One unit (a single token's quantisation or angles, in generation) is not worth
        // waking the workers for.
        // (Shares packs both ends of a share in one u64.)
        if units <= 1 || units > u32::MAX as usize {
            return work(0..units);
        }
        let shares = Shares::new(units, self.threads());
        let result = std::sync::Mutex::new(Ok(()));
        let failed = std::sync::atomic::AtomicBool::new(false);
        let panicked = self.run(&|i| {
            while let Some(range) = shares.next(i) {
                if failed.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if let Err(e) = work(range) {
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
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
}

/// `0..units` in one contiguous share per thread, handed out a grain at a time: each thread
/// takes its own share from the front (one stream through its weights, as a static split), and
/// a thread that runs out takes grains from the back of the others' shares. Threads that start
/// late or run slower (a busy core, a colder cache) then no longer make the rest wait; which
/// thread computes a unit never changes its bits, since every unit writes only its own outputs.
#[cfg(feature = "std")]
struct Shares {
    /// Each share's `front << 32 | back`, taken from either end by compare-and-swap.
    ends: Vec<std::sync::atomic::AtomicU64>,
    grain: u64,
}

#[cfg(feature = "std")]
impl Shares {
    fn new(units: usize, threads: usize) -> Shares {
        use std::sync::atomic::AtomicU64;
        let per = units.div_ceil(threads.max(1)).max(1);
        // About 16 grains a share: a steal at the end costs at most one grain's time.
        let grain = (per / 16).max(1) as u64;
        let ends = (0..threads.max(1))
            .map(|i| {
                let (front, back) = ((i * per).min(units) as u64, ((i + 1) * per).min(units) as u64);
                AtomicU64::new(front << 32 | back)
            })
            .collect();
        Shares { ends, grain }
    }

    /// Thread `i`'s next range: from its own share's front, else from another's back.
    fn next(&self, i: usize) -> Option<Range<usize>> {
        let t = self.ends.len();
        self.take(i % t, true).or_else(|| (1..t).find_map(|d| self.take((i + d) % t, false)))
    }

    fn take(&self, share: usize, front: bool) -> Option<Range<usize>> {
        use std::sync::atomic::Ordering;
        let end = &self.ends[share];
        let mut cur = end.load(Ordering::Relaxed);
        loop {
            let (f, b) = (cur >> 32, cur & 0xFFFF_FFFF);
            if f >= b {
                return None;
            }
            let (next, range) = if front {
                let nf = (f + self.grain).min(b);
                (nf << 32 | b, f..nf)
            } else {
                let nb = b.saturating_sub(self.grain).max(f);
                (f << 32 | nb, nb..b)
            };
            match end.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(range.start as usize..range.end as usize),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// `f(i)` for every `i < n` on the threads of `par`, in order.
pub fn map<T: Send>(
    par: &dyn Parallel,
    n: usize,
    f: &(dyn Fn(usize) -> Result<T, BitnetError> + Sync),
) -> Result<Vec<T>, BitnetError> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let slots = Disjoint::new(&mut out);
    par.ranges(n, &|range| {
        // SAFETY: `ranges` hands out disjoint ranges of 0..n.
        let slots = unsafe { slots.range_mut(range.clone()) };
        for (slot, i) in slots.iter_mut().zip(range) {
            *slot = Some(f(i)?);
        }
        Ok(())
    })?;
    // Every slot was filled (or `ranges` failed above).
    Ok(out.into_iter().flatten().collect())
}

/// A slice that threads write in disjoint parts, each part named by its range: what lets a work
/// unit write its outputs where they belong (a column block of every row) instead of into a
/// contiguous chunk that is copied into place afterwards.
pub struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: `Disjoint` only hands out `&mut` to parts the caller promises are disjoint, so sharing
// it between threads is sharing `&mut [T]` parts, which needs `T: Send`.
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    pub fn new(s: &'a mut [T]) -> Self {
        Disjoint { ptr: s.as_mut_ptr(), len: s.len(), _borrow: PhantomData }
    }

    /// Elements `r` (clamped to the slice).
    ///
    /// # Safety
    /// No two live results of `range_mut` on one `Disjoint` may overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, r: Range<usize>) -> &mut [T] {
        let (start, end) = (r.start.min(self.len), r.end.min(self.len));
        // SAFETY: in bounds (clamped); exclusive by the caller's promise; the borrow of the
        // slice outlives `self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(start), end.saturating_sub(start)) }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_unit_is_handed_out_once_however_the_threads_race() {
        for threads in 1..=4 {
            let pool = crate::bitnet::pool::Pool::new(threads).unwrap();
            for units in [2, 3, 17, 64, 1000] {
                let hits: Vec<AtomicUsize> = (0..units).map(|_| AtomicUsize::new(0)).collect();
                pool.ranges(units, &|r| {
                    // Uneven work, so that stealing happens.
                    if r.start % 3 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    r.for_each(|u| {
                        hits[u].fetch_add(1, Ordering::Relaxed);
                    });
                    Ok(())
                })
                .unwrap();
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{threads} threads, {units} units");
            }
        }
        // Stealing from the back of a share: a thread with nothing of its own takes the rest.
        let shares = Shares::new(10, 2);
        assert_eq!(shares.take(1, true), Some(5..6));
        assert_eq!(shares.take(1, false), Some(9..10));
        let mut left = 0;
        while let Some(r) = shares.next(1) {
            left += r.len();
        }
        assert_eq!(left, 8);
        assert_eq!(shares.next(0), None);
    }

    #[test]
    fn the_first_error_is_returned() {
        let pool = crate::bitnet::pool::Pool::new(2).unwrap();
        let err = pool.ranges(100, &|r| if r.contains(&70) { Err(BitnetError::WorkerPanicked) } else { Ok(()) });
        assert_eq!(err, Err(BitnetError::WorkerPanicked));
    }
}
