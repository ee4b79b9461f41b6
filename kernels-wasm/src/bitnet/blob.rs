//! The bytes of a packed matrix: owned, or a window into a shared buffer such as a
//! memory-mapped model file, so loading a model does not copy its weights.

use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;
#[cfg(target_has_atomic = "ptr")]
use core::ops::Range;

/// A shared, read-only byte buffer (a memory map, or a whole file read into memory).
#[cfg(target_has_atomic = "ptr")]
pub type Shared = alloc::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

#[derive(Clone)]
enum Inner {
    Owned(Vec<u8>),
    // Targets without atomic pointers (small microcontrollers) have no `Arc`; they own bytes.
    #[cfg(target_has_atomic = "ptr")]
    Shared(Shared, Range<usize>),
}

/// Bytes that dereference to `[u8]`, whoever owns them.
#[derive(Clone)]
pub struct Blob(Inner);

impl Blob {
    /// `range` of `data`, or `None` if it lies outside.
    #[cfg(target_has_atomic = "ptr")]
    pub fn shared(data: Shared, range: Range<usize>) -> Option<Blob> {
        let len = (*data).as_ref().len();
        (range.start <= range.end && range.end <= len).then_some(Blob(Inner::Shared(data, range)))
    }

    /// The first `len` bytes, or `None` if there are fewer.
    pub fn prefix(self, len: usize) -> Option<Blob> {
        match self.0 {
            Inner::Owned(mut v) if len <= v.len() => {
                v.truncate(len);
                Some(Blob(Inner::Owned(v)))
            }
            #[cfg(target_has_atomic = "ptr")]
            Inner::Shared(d, r) if len <= r.len() => Some(Blob(Inner::Shared(d, r.start..r.start + len))),
            _ => None,
        }
    }

    /// Whether the bytes live in a shared buffer (not copied).
    pub fn is_shared(&self) -> bool {
        !matches!(self.0, Inner::Owned(_))
    }
}

impl From<Vec<u8>> for Blob {
    fn from(v: Vec<u8>) -> Blob {
        Blob(Inner::Owned(v))
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Owned(v) => v,
            #[cfg(target_has_atomic = "ptr")]
            Inner::Shared(d, r) => &(**d).as_ref()[r.clone()],
        }
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Blob) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes{})", self.len(), if self.is_shared() { ", shared" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_shared_window_reads_its_range_and_refuses_one_outside() {
        let data: Shared = alloc::sync::Arc::new((0u8..10).collect::<Vec<u8>>());
        let b = Blob::shared(data.clone(), 3..6).expect("inside");
        assert_eq!(&*b, &[3, 4, 5]);
        assert!(b.is_shared());
        assert_eq!(b, Blob::from(alloc::vec![3, 4, 5]));
        assert!(Blob::shared(data.clone(), 8..11).is_none());
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 6..3;
        assert!(Blob::shared(data, reversed).is_none());
    }
}
