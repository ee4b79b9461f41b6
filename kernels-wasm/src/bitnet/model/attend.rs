//! The inner loops of attention for one head and one query row: the scores `q·k_p`, `exp` for
//! the softmax, and `Σ_p w_p·v_p`. Each sums in one fixed order on every target (so scalar,
//! SIMD, wasm and any thread count give the same bits); the AVX forms keep that order and only
//! change which sums run side by side.
//!
//! Where every factor is an F16 value (the forward pass rounds queries, cached keys and values,
//! and the softmax weights to F16, as ggml does), each product has at most 22 significant bits
//! and an exponent far inside f32's range, so it is exact in f32: a fused multiply-add then
//! rounds only where the add alone rounded, and gives the bits of a multiply and an add with
//! half the instructions ([`Products::Exact`]).

/// An element of the KV cache as the kernels read it: f32, or an IEEE half's bits (`u16`: llama.cpp's default
/// cache type, half the bytes to read per position). The forward pass caches only values it has
/// rounded to F16, so either holds the same numbers, and every kernel gives the same bits on
/// both: widening F16 to f32 is exact.
pub trait Kv: Copy + Send + Sync + 'static {
    fn get(self) -> f32;

    /// Eight elements from `p`, widened.
    ///
    /// # Safety
    /// AVX2 and F16C; eight elements readable from `p`.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256;

    /// Sixteen elements from `p`, widened.
    ///
    /// # Safety
    /// AVX-512 F; sixteen elements readable from `p`.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    unsafe fn load16(p: *const Self) -> core::arch::x86_64::__m512;
}

impl Kv for f32 {
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_loadu_ps(p)
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> core::arch::x86_64::__m512 {
        core::arch::x86_64::_mm512_loadu_ps(p)
    }
}

/// An IEEE half's bits, as the KV cache stores them.
impl Kv for u16 {
    /// Exactly [`crate::gguf::f16_to_f32`], without branches so that loops over a row vectorise:
    /// the exponent and fraction moved into place and multiplied by 2¹¹² (which rebiases the
    /// exponent and renormalises subnormals, exactly: a power of two), infinities and NaN given
    /// the all-ones exponent, the sign put back.
    #[inline(always)]
    fn get(self) -> f32 {
        let h = self as u32;
        let mag = (h & 0x7fff) << 13;
        let scaled = (f32::from_bits(mag) * f32::from_bits(0x7780_0000)).to_bits();
        let bits = if h & 0x7c00 == 0x7c00 { mag | 0x7f80_0000 } else { scaled };
        f32::from_bits(bits | (h & 0x8000) << 16)
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }

    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[inline(always)]
    unsafe fn load16(p: *const u16) -> core::arch::x86_64::__m512 {
        use core::arch::x86_64::*;
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
}

/// What the caller promises about the products of the sums (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Products {
    /// Both factors of every product are F16 values: fused multiply-adds give the same bits.
    Exact,
    /// Any f32 values: multiply, round, then add.
    Rounded,
}

/// `q·k_p·scale` for every position `p < out.len()`; row `p` of `keys` starts at `p * stride`.
/// (The forward pass calls [`scores_many`], one query being `Q = 1`.)
#[cfg(test)]
pub fn scores<K: Kv>(q: &[f32], keys: &[K], stride: usize, scale: f32, out: &mut [f32]) {
    scores_many([q], keys, stride, scale, [out], Products::Rounded);
}

/// [`scores`] without the AVX-512 form: eight rows at a time on AVX2 (four where the query is
/// not a whole number of registers), else one by one.
#[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))] // `products`: x86 fuses
fn scores_rest<K: Kv>(q: &[f32], keys: &[K], stride: usize, scale: f32, out: &mut [f32], products: Products) {
    let row = |p: usize| &keys[p * stride..][..q.len()];
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if x86::avx2() {
        let mut eights = [0];
        if q.len().is_multiple_of(8) {
            let (q, out) = (&[q][..], &mut [&mut *out][..]);
            // SAFETY: the CPU has AVX2, FMA and F16C (checked just above); the query's length is a
            // multiple of 8.
            unsafe {
                match products {
                    Products::Exact => x86::scores_groups::<true, K>(q, keys, stride, scale, out, &mut eights),
                    Products::Rounded => x86::scores_groups::<false, K>(q, keys, stride, scale, out, &mut eights),
                }
            }
        }
        let eights = eights[0];
        let whole = eights + (out.len() - eights) / 4 * 4;
        for p in (eights..whole).step_by(4) {
            let rows = [row(p), row(p + 1), row(p + 2), row(p + 3)];
            // SAFETY: the CPU has AVX2, FMA and F16C (checked just above); the rows are `q.len()` long.
            let s = unsafe {
                match products {
                    Products::Exact => x86::dot4::<true, K>(q, rows),
                    Products::Rounded => x86::dot4::<false, K>(q, rows),
                }
            };
            for (o, s) in out[p..p + 4].iter_mut().zip(s) {
                *o = s * scale;
            }
        }
        for (p, o) in out.iter_mut().enumerate().skip(whole) {
            *o = dot(q, row(p)) * scale;
        }
        return;
    }
    for (p, o) in out.iter_mut().enumerate() {
        *o = dot(q, row(p)) * scale;
    }
}

/// The largest score, eight lanes at a time so the loop vectorises: a maximum is the same in
/// any order (where +0 and −0 tie, either gives the same `exp(s − max)`).
#[inline(always)]
pub fn max(w: &[f32]) -> f32 {
    let mut l = [f32::NEG_INFINITY; 8];
    let chunks = w.chunks_exact(8);
    for (j, &v) in chunks.remainder().iter().enumerate() {
        l[j] = l[j].max(v);
    }
    for c in chunks {
        for j in 0..8 {
            l[j] = l[j].max(c[j]);
        }
    }
    l.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `o[e] += Σ_p w[p]·v_p[e]`, each element summed in `p` order; row `p` of `values` starts at
/// `p * stride`.
#[cfg(test)]
pub fn accumulate<K: Kv>(o: &mut [f32], w: &[f32], values: &[K], stride: usize) {
    accumulate_many([o], [w], values, stride, Products::Rounded);
}

/// [`accumulate`] without the AVX-512 form: register blocks on AVX2, the rest element-wise.
#[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_variables))] // `products`: x86 fuses
fn accumulate_rest<K: Kv>(o: &mut [f32], w: &[f32], values: &[K], stride: usize, products: Products) {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let whole = if x86::avx2() {
        let whole = o.len() / 8 * 8;
        let (o, w) = (&mut [&mut o[..whole]][..], &[w][..]);
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just above); the output is a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::accumulate_groups::<true, K>(o, w, values, stride),
                Products::Rounded => x86::accumulate_groups::<false, K>(o, w, values, stride),
            }
        };
        whole
    } else {
        0
    };
    #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
    let whole = 0;
    let d = o.len();
    for (p, &s) in w.iter().enumerate() {
        for (acc, v) in o[whole..].iter_mut().zip(&values[p * stride + whole..][..d - whole]) {
            *acc += s * v.get();
        }
    }
}

/// [`scores`] for `Q` queries of one head (neighbouring tokens of a prompt) against the same
/// keys, `out[t]` for query t: on AVX-512 and AVX2, each key is loaded once for all of them (in
/// groups on AVX2) and more sums run side by side. Every score is still its own [`dot`], so
/// the bits are those of `Q` `scores` calls.
pub fn scores_many<const Q: usize, K: Kv>(
    q: [&[f32]; Q],
    keys: &[K],
    stride: usize,
    scale: f32,
    out: [&mut [f32]; Q],
    products: Products,
) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut out, mut first) = (out, [0; Q]);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let whole = q[0].len().is_multiple_of(8) && q.iter().all(|x| x.len() == q[0].len());
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if whole && x86::avx512() {
        let d = q[0].len();
        let common = out.iter().map(|o| o.len()).min().unwrap_or(0) / 8 * 8;
        first = [common; Q];
        for p in (0..common).step_by(8) {
            x86::prefetch(keys, (p + AHEAD) * stride, 8 * stride);
            let rows = core::array::from_fn(|r| &keys[(p + r) * stride..][..d]);
            // SAFETY: AVX-512 F/DQ were detected; the rows are `d` long, a multiple of 8.
            let s = unsafe {
                match products {
                    Products::Exact => x86::dot8_512::<Q, true, K>(q, rows),
                    Products::Rounded => x86::dot8_512::<Q, false, K>(q, rows),
                }
            };
            for (out, s) in out.iter_mut().zip(s) {
                for (o, s) in out[p..p + 8].iter_mut().zip(s) {
                    *o = s * scale;
                }
            }
        }
    } else if whole && x86::avx2() {
        let mut parts = out.each_mut().map(|o| &mut **o);
        // SAFETY: AVX2, FMA and F16C were detected; the queries are one length, a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::scores_groups::<true, K>(&q, keys, stride, scale, &mut parts, &mut first),
                Products::Rounded => x86::scores_groups::<false, K>(&q, keys, stride, scale, &mut parts, &mut first),
            }
        }
    }
    for ((q, out), first) in q.into_iter().zip(out).zip(first) {
        scores_rest(q, keys.get(first * stride..).unwrap_or(&[]), stride, scale, &mut out[first..], products);
    }
}

/// Scores to softmax weights in place, `Q` rows at once, as ggml's soft_max does each row:
/// `exp(s − max)`, their sum in f64 in position order, each weight times `1/sum` (rounded once
/// to f32). The rows' sums run side by side, so `Q` chains of dependent additions overlap
/// instead of running one after another; each row's bits are those it has alone.
pub fn softmax_many<const Q: usize>(mut w: [&mut [f32]; Q]) {
    for w in w.iter_mut() {
        exp_shifted(w);
    }
    let mut sum = [0.0f64; Q];
    let common = w.iter().map(|w| w.len()).min().unwrap_or(0);
    for p in 0..common {
        for (s, w) in sum.iter_mut().zip(w.iter()) {
            *s += w[p] as f64;
        }
    }
    for (s, w) in sum.iter_mut().zip(w.iter_mut()) {
        // The rest of a longer row, still one position after another.
        for &v in &w[common..] {
            *s += v as f64;
        }
        scale_by(w, (1.0 / *s) as f32);
    }
}

/// [`accumulate`] for `Q` queries of one head against the same values: on AVX-512 and AVX2, the
/// positions all of them weigh go through one pass that loads each value row once for all (in
/// groups on AVX2) and keeps more independent chains of additions, then each goes on alone. Every element still
/// adds its positions in order, so the bits are those of `Q` `accumulate` calls.
pub fn accumulate_many<const Q: usize, K: Kv>(
    o: [&mut [f32]; Q],
    w: [&[f32]; Q],
    values: &[K],
    stride: usize,
    products: Products,
) {
    #[cfg_attr(not(all(target_arch = "x86_64", feature = "std")), allow(unused_mut))]
    let (mut o, mut done) = (o, 0);
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    let same = o.iter().all(|x| x.len() == o[0].len());
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    if same && x86::avx512() && o[0].len().is_multiple_of(x86::L512) {
        done = w.iter().map(|w| w.len()).min().unwrap_or(0);
        let parts: [&mut [f32]; Q] = o.each_mut().map(|o| &mut **o);
        // SAFETY: AVX-512 F was detected; every output a whole number of register blocks.
        let w = w.map(|w| &w[..done]);
        unsafe {
            match products {
                Products::Exact => x86::accumulate_512::<Q, true, K>(parts, w, values, stride),
                Products::Rounded => x86::accumulate_512::<Q, false, K>(parts, w, values, stride),
            }
        };
    } else if same && x86::avx2() && o[0].len().is_multiple_of(8) {
        done = w.iter().map(|w| w.len()).min().unwrap_or(0);
        let mut parts = o.each_mut().map(|o| &mut **o);
        let w = w.map(|w| &w[..done]);
        // SAFETY: AVX2, FMA and F16C were detected; the outputs are one length, a multiple of 8.
        unsafe {
            match products {
                Products::Exact => x86::accumulate_groups::<true, K>(&mut parts, &w, values, stride),
                Products::Rounded => x86::accumulate_groups::<false, K>(&mut parts, &w, values, stride),
            }
        };
    }
    for (o, w) in o.iter_mut().zip(w) {
        accumulate_rest(o, &w[done..], values.get(done * stride..).unwrap_or(&[]), stride, products);
    }
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod x86;

/// Positions ahead whose keys or values the AVX loops ask for (a head's rows lie together, see
/// `cache`): 16 rows of a 96-wide F16 head are 3 KB. On the 1.5B layout at depth 2,048
/// (Intel Xeon, 2 threads) this gave generation 4 % more speed; 48 rows ahead gave less, 8 no
/// more.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
const AHEAD: usize = 16;

/// The fixed tree that ends [`dot`] (and the Q8_0 output layer's eight lanes): lane j holds
/// elements j, j + 8, ….
#[inline(always)]
pub(crate) fn tree(l: &[f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// `Σ a·b` in a fixed order: eight lanes (element j to lane j mod 8), then a fixed tree. The
/// compiler vectorises it, and every target sums alike.
#[inline(always)]
pub fn dot<K: Kv>(a: &[f32], b: &[K]) -> f32 {
    let mut l = [0.0f32; 8];
    let whole = a.len() / 8 * 8;
    for (ca, cb) in a[..whole].chunks_exact(8).zip(b[..whole].chunks_exact(8)) {
        for j in 0..8 {
            l[j] += ca[j] * cb[j].get();
        }
    }
    for j in whole..a.len() {
        l[j % 8] += a[j] * b[j].get();
    }
    tree(&l)
}

/// `exp(x)` for the softmax, as Cephes' `expf` computes it (x = n·ln2 + r, a degree-6
/// polynomial in r, times 2ⁿ), within 2 ulp of the true value; only additions and
/// multiplications, so the loop over a row vectorises and every target gives the same bits.
pub fn expf(x: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    let x = x.clamp(-87.0, 88.0);
    // Round x·log2(e) to the nearest integer by pushing it through the mantissa; the sum's low
    // mantissa bits are that integer (read from the bits: an `as` conversion saturates, which
    // LLVM does lane by lane, and this loop should stay in vector registers).
    let t = x * LOG2E + 12_582_912.0;
    let (n, ni) = (t - 12_582_912.0, t.to_bits() as i32 - 0x4B40_0000);
    // ln 2 in two parts, so r = x − n·ln2 stays exact.
    let r = (x - n * 0.693_359_4) - n * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((ni + 127) as u32) << 23)
}

crate::bitnet::wide::wide_fn! {
    /// `s ← exp(s − max)`: the softmax's first step.
    fn exp_shifted(w: &mut [f32]) {
        let max = max(w);
        w.iter_mut().for_each(|s| *s = expf(*s - max));
    }
}

crate::bitnet::wide::wide_fn! {
    /// `s ← s·inv`: the softmax's last step.
    fn scale_by(w: &mut [f32], inv: f32) {
        w.iter_mut().for_each(|s| *s *= inv);
    }
}

crate::bitnet::wide::wide_fn! {
    /// `g = silu(g) · u` element by element: the FFN's gate (SiLU, with this `exp`) times its up
    /// projection.
    pub fn silu_mul(g: &mut [f32], u: &[f32]) {
        for (g, u) in g.iter_mut().zip(u) {
            *g = *g / (1.0 + expf(-*g)) * u;
        }
    }
}

#[cfg(test)]
mod tests;
