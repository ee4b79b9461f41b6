//! The KV cache, and the working rows a block keeps from one call to the next.
//!
//! Keys and values are cached as F16 bits, llama.cpp's default cache type: the forward pass
//! rounds them to F16 before they meet a query either way (see [`super::forward`]), so the
//! cache loses nothing, holds half the bytes, and attention reads half as many per position
//! (the kernels widen them as they load). The f32 reference forward, which rounds nothing,
//! needs an f32 cache ([`Cache::f32`]); the rounded pass runs on either and gives the same bits.
//!
//! Each KV head's positions lie together (row `p` of head `h` at `(h·context + p)·head_dim`), so
//! attention reads a head's keys and values as one stream. Laid out position-major, a head's
//! rows were `kv_dim` apart, every position's read crossed a page, and the hardware prefetchers,
//! which stop at page boundaries, left each one a miss: at 2,048 positions of the 1.5B layout
//! that made generation twice as slow as the bytes read explain.

use super::attend::Kv;
use super::config::Config;
use super::table;
use alloc::vec;
use alloc::vec::Vec;

/// One block's keys and values: `kv_heads × context × head_dim` each (see the module notes).
#[derive(Debug, Clone)]
pub enum Rows {
    /// IEEE halves' bits.
    F16 {
        k: Vec<u16>,
        v: Vec<u16>,
    },
    F32 {
        k: Vec<f32>,
        v: Vec<f32>,
    },
}

impl Rows {
    fn zeroed(half: bool, len: usize) -> Rows {
        // `vec![0; n]` asks for zeroed memory, so the pages of a cache that a short conversation
        // never reaches are never written.
        if half {
            Rows::F16 { k: vec![0; len], v: vec![0; len] }
        } else {
            Rows::F32 { k: vec![0.0; len], v: vec![0.0; len] }
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Rows::F16 { k, v } => (k.len() + v.len()) * F16_BYTES,
            Rows::F32 { k, v } => (k.len() + v.len()) * 4,
        }
    }

    /// Stores the keys and values of positions `start..` (`keys` and `values` hold a row of
    /// `kv_heads × head_dim` per position, head after head), each rounded to the nearest F16
    /// (ties to even, as [`table::round_to_f16`]) where `round`: an F16 cache always rounds
    /// (the f32 reference, which does not, takes an f32 cache), an f32 one where asked.
    pub fn store(
        &mut self,
        start: usize,
        (kv_heads, head_dim): (usize, usize),
        keys: &[f32],
        values: &[f32],
        round: bool,
    ) {
        type Put<T> = fn(&[f32], &mut [T]);
        let shape = (start, kv_heads, head_dim);
        fn put<T>(rows: &mut [T], new: &[f32], (start, kv_heads, hd): (usize, usize, usize), f: Put<T>) {
            let context = rows.len() / (kv_heads * hd);
            for (i, row) in new.chunks_exact(kv_heads * hd).enumerate() {
                for (h, head) in row.chunks_exact(hd).enumerate() {
                    f(head, &mut rows[(h * context + start + i) * hd..][..hd]);
                }
            }
        }
        match self {
            Rows::F32 { k, v } => {
                let f: Put<f32> = if round {
                    |x, o| {
                        o.copy_from_slice(x);
                        table::round_to_f16(o)
                    }
                } else {
                    |x, o| o.copy_from_slice(x)
                };
                put(k, keys, shape, f);
                put(v, values, shape, f);
            }
            Rows::F16 { k, v } => {
                put(k, keys, shape, table::to_f16);
                put(v, values, shape, table::to_f16);
            }
        }
    }

    /// `f` on the keys and values, whatever their type.
    pub fn read<T>(&self, f: impl ReadRows<T>) -> T {
        match self {
            Rows::F16 { k, v } => f.read(k, v),
            Rows::F32 { k, v } => f.read(k, v),
        }
    }
}

/// Bytes an F16 cache keeps per key or value.
pub const F16_BYTES: usize = 2;

/// What reads a block's cached keys and values, generic over their element type (which a
/// closure cannot be).
pub trait ReadRows<T> {
    fn read<K: Kv>(self, keys: &[K], values: &[K]) -> T;
}

/// The KV cache of every layer: `context × kv_dim` keys and values each; and the rows a block
/// works in, kept from one call to the next.
#[derive(Debug, Clone)]
pub struct Cache {
    kv: Vec<Rows>,
    scratch: Scratch,
    /// Positions filled.
    pub len: usize,
    pub context: usize,
}

/// One block's part of a [`Cache`], what [`super::forward::Block::forward`] reads and writes.
pub struct Layer<'a> {
    pub kv: &'a mut Rows,
    pub scratch: &'a mut Scratch,
}

/// The working rows of a block: a 512-token prompt's are megabytes per layer, and allocating
/// them afresh in every layer cost 18 % of the prompt's time in page faults, zeroing and
/// copies. Nothing in them outlives a call (each value is written before it is read), so a
/// clone starts empty.
#[derive(Debug, Default)]
pub struct Scratch {
    /// The normalised input of the attention, then of the FFN.
    pub(super) h: Vec<f32>,
    /// What the block adds to its input: the attention's, then the FFN's output projection.
    pub(super) y: Vec<f32>,
    pub(super) q: Vec<f32>,
    /// The new positions' keys and values, before they are stored.
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    /// The attention's output rows, token by token (head after head in each).
    pub(super) att: Vec<f32>,
    pub(super) gate: Vec<f32>,
    pub(super) up: Vec<f32>,
}

impl Clone for Scratch {
    fn clone(&self) -> Scratch {
        Scratch::default()
    }
}

/// `buf` as `len` values, for a caller that writes every one before reading it.
pub(super) fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.resize(len, 0.0);
    &mut buf[..len]
}

impl Cache {
    /// A cache of F16 keys and values, for every block of a model shaped `c`.
    pub fn new(c: &Config, context: usize) -> Cache {
        Cache::for_layers(c, c.layers, context)
    }

    /// A cache of f32 keys and values, for the f32 reference forward ([`super::Exec::reference`]).
    pub fn f32(c: &Config, context: usize) -> Cache {
        Cache::of(c, c.layers, context, false)
    }

    /// An F16 cache for `layers` blocks of a model shaped `c` (an ESP32 node holds a few).
    pub fn for_layers(c: &Config, layers: usize, context: usize) -> Cache {
        Cache::of(c, layers, context, true)
    }

    fn of(c: &Config, layers: usize, context: usize, half: bool) -> Cache {
        let size = context * c.kv_dim();
        let kv = (0..layers).map(|_| Rows::zeroed(half, size)).collect();
        Cache { kv, scratch: Scratch::default(), len: 0, context }
    }

    /// Bytes of the F16 cache [`Cache::for_layers`] makes: what a context costs before it is
    /// allocated (the ESP32 budget, the CLI's check).
    pub fn bytes_for(c: &Config, layers: usize, context: usize) -> u64 {
        (2 * layers * F16_BYTES) as u64 * context as u64 * c.kv_dim() as u64
    }

    /// Whether keys and values are kept as F16.
    pub fn is_f16(&self) -> bool {
        self.kv.first().is_none_or(|r| matches!(r, Rows::F16 { .. }))
    }

    /// Keys and values of the cache's block `b`, and the working rows.
    pub fn layer(&mut self, b: usize) -> Layer<'_> {
        Layer { kv: &mut self.kv[b], scratch: &mut self.scratch }
    }

    /// Bytes the KV cache holds.
    pub fn bytes(&self) -> usize {
        self.kv.iter().map(Rows::bytes).sum()
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}
