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
    /// it, at most one per thread; the first error wins.
    fn ranges(&self, units: usize, work: &RangeWork) -> Result<(), BitnetError>;
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

    fn ranges(&self, units: usize, work: &RangeWork) -> Result<(), BitnetError> {
        // One unit (a single token's quantisation or angles, in generation) is not worth
        // waking the workers for.
        if units <= 1 {
            return work(0..units);
        }
        let per = units.div_ceil(self.threads()).max(1);
        let result = std::sync::Mutex::new(Ok(()));
        let panicked = self.run(&|i| {
            let range = (i * per).min(units)..((i + 1) * per).min(units);
            if !range.is_empty() {
                if let Err(e) = work(range) {
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
