//! How a layer's output rows are shared out: on one thread (`no_std`, wasm, microcontrollers) or
//! on the persistent [`crate::bitnet::pool::Pool`], each thread one contiguous share.

use crate::bitnet::BitnetError;

/// One thread's part: `(first_unit, chunk)`.
pub type Work<'a> = dyn Fn(usize, &mut [f32]) -> Result<(), BitnetError> + Sync + 'a;

/// Work on contiguous chunks of an output.
pub trait Parallel: Sync {
    fn threads(&self) -> usize;
    /// Calls `work(first_unit, chunk)` for contiguous chunks of `out`, each a whole number of
    /// units of `unit` values, together covering `out`; the first error wins.
    fn split(&self, out: &mut [f32], unit: usize, work: &Work) -> Result<(), BitnetError>;
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
}

#[cfg(feature = "std")]
impl Parallel for crate::bitnet::pool::Pool {
    fn threads(&self) -> usize {
        crate::bitnet::pool::Pool::threads(self)
    }

    fn split(&self, out: &mut [f32], unit: usize, work: &Work) -> Result<(), BitnetError> {
        crate::bitnet::threads::split(self, unit, out, || Ok(()), |_, first, chunk| work(first, chunk))
    }
}
