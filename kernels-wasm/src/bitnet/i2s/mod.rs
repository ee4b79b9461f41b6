//! I2_S: ternary weights as 2-bit codes `w + 1`, multiplied with int8 activations by a
//! multiply-add kernel: `acc = Σ code·q − Σ q = Σ w·q`.
//!
//! Byte layout (x86, bitnet.cpp's `QK_I2_S` = 128): each row is cut into blocks of 128
//! weights stored in 32 bytes; weight `j` of a block sits in byte `j % 32` at bit shift
//! `6 − 2·(j / 32)`. So one 32-byte load, shifted by 6, 4, 2 and 0 and masked with 3, yields
//! the codes of weights 0–31, 32–63, 64–95 and 96–127 in order — the four activation slices.
//! The ARM layout is the same with 64-weight blocks in 16 bytes. The tensor's single f32
//! scale follows the codes when stored.

#[cfg(all(target_arch = "x86_64", feature = "std"))]
pub mod amx;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "wasm32")]
mod simd128;
#[cfg(all(target_arch = "x86_64", feature = "std"))]
pub mod unpacked;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::backend::Backend;
use super::blob::Blob;
use super::quant::{check_len, QuantActs, TernaryMatrix};
use super::{dequantize_into, BitnetError};
use alloc::vec;

/// Where the block GEMMs ([`I2sMatrix::gemm_amx`], [`I2sMatrix::gemm_unpacked`]) put their
/// results: `emit(t0, runs)` gets activation rows `t0..`, a run of 32 `Σ w·q` each, a few rows
/// at a time. The caller's epilogue (dequantising into the output rows) runs while the runs
/// are still in L1 and between the next rows' arithmetic, instead of a whole block's results
/// (64 KiB for 512 rows, more than L1) going out to L2 and coming back.
pub type Emit<'a> = dyn FnMut(usize, &[i32]) + 'a;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum I2sLayout {
    /// 128 weights in 32 bytes.
    X86,
    /// 64 weights in 16 bytes.
    Arm,
}

impl I2sLayout {
    /// Weights per block.
    pub const fn block(self) -> usize {
        match self {
            I2sLayout::X86 => 128,
            I2sLayout::Arm => 64,
        }
    }

    /// Bytes per block (= weights per 2-bit plane).
    pub const fn lanes(self) -> usize {
        self.block() / 4
    }
}

/// A packed I2_S matrix: M rows of K weights.
#[derive(Debug, Clone, PartialEq)]
pub struct I2sMatrix {
    pub rows: usize,
    pub cols: usize,
    pub layout: I2sLayout,
    /// `rows * cols / 4` bytes, row after row.
    pub codes: Blob,
    pub scale: f32,
}

impl I2sMatrix {
    pub fn pack(t: &TernaryMatrix, layout: I2sLayout) -> Result<Self, BitnetError> {
        let (block, lanes) = (layout.block(), layout.lanes());
        if !t.cols.is_multiple_of(block) {
            return Err(BitnetError::Shape {
                format: "I2_S",
                m: t.rows,
                k: t.cols,
                why: alloc::format!("K must be a multiple of {block} (the I2_S block)"),
            });
        }
        let mut codes = vec![0u8; t.rows * t.cols / 4];
        for (i, &w) in t.w.iter().enumerate() {
            let (block_start, j) = (i / block * block, i % block);
            let byte = block_start / 4 + j % lanes;
            codes[byte] |= ((w + 1) as u8) << (6 - 2 * (j / lanes));
        }
        Ok(I2sMatrix { rows: t.rows, cols: t.cols, layout, codes: codes.into(), scale: t.scale })
    }

    pub fn unpack(&self) -> TernaryMatrix {
        let (block, lanes) = (self.layout.block(), self.layout.lanes());
        let w = (0..self.rows * self.cols)
            .map(|i| {
                let (block_start, j) = (i / block * block, i % block);
                let code = (self.codes[block_start / 4 + j % lanes] >> (6 - 2 * (j / lanes))) & 3;
                code as i8 - 1
            })
            .collect();
        TernaryMatrix { rows: self.rows, cols: self.cols, w, scale: self.scale }
    }

    fn row_codes(&self, r: usize) -> &[u8] {
        let n = self.cols / 4;
        &self.codes[r * n..(r + 1) * n]
    }

    /// Rows `r..r + 4` of `codes` (the matrix's codes, dereferenced once by the caller: behind
    /// a memory map each dereference is a call).
    #[cfg(target_arch = "x86_64")]
    fn quad<'c>(&self, codes: &'c [u8], r: usize) -> [&'c [u8]; 4] {
        let n = self.cols / 4;
        core::array::from_fn(|k| &codes[(r + k) * n..(r + k + 1) * n])
    }

    /// Exact int32 accumulators `Σ_k w[r][k]·q[k]` of every row into `acc`.
    pub fn gemv_acc(&self, q: &[i8], backend: Backend, acc: &mut [i32]) -> Result<(), BitnetError> {
        check_len("accumulators", self.rows, acc.len())?;
        self.gemv_acc_rows(q, backend, 0, acc)
    }

    /// The accumulators of rows `first_row..first_row + acc.len()`: one thread's share.
    pub fn gemv_acc_rows(
        &self,
        q: &[i8],
        backend: Backend,
        first_row: usize,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        self.gemv_acc_rows_summed(q, q_sum(q), backend, first_row, acc)
    }

    /// [`Self::gemv_acc_rows`] given `q_sum = Σq` (computed once per activation row by
    /// [`q_sum`] when many row blocks share it).
    pub fn gemv_acc_rows_summed(
        &self,
        q: &[i8],
        q_sum: i32,
        backend: Backend,
        first_row: usize,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        self.gemm_acc_rows(&[q], &[q_sum], backend, first_row, acc)
    }

    /// That `q` is one activation row for this matrix and rows `first_row..first_row + rows` exist.
    fn check_rows(&self, q: &[i8], first_row: usize, rows: usize) -> Result<(), BitnetError> {
        check_len("activations", self.cols, q.len())?;
        if first_row + rows > self.rows {
            return Err(BitnetError::Length { what: "rows", expected: self.rows, got: first_row + rows });
        }
        Ok(())
    }

    /// [`Self::gemv_acc_rows_summed`] for several activation rows at once (prompt processing):
    /// `acc` holds `q.len()` runs of `rows` accumulators, the first activation row's first. The
    /// wide kernels read each weight quad once for up to four activation rows (AVX-512) or two
    /// (AVX2); the rows past the last whole quad go one by one.
    pub fn gemm_acc_rows(
        &self,
        q: &[&[i8]],
        q_sum: &[i32],
        backend: Backend,
        first_row: usize,
        acc: &mut [i32],
    ) -> Result<(), BitnetError> {
        check_len("activation sums (one per activation row)", q.len(), q_sum.len())?;
        let rows = acc.len() / q.len().max(1);
        check_len("accumulators (the same rows for every activation row)", q.len() * rows, acc.len())?;
        for qt in q {
            self.check_rows(qt, first_row, rows)?;
        }
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if self.layout == I2sLayout::X86 && backend.is_available() {
            let codes: &[u8] = &self.codes;
            let quads = rows / 4 * 4;
            let mut put = |t: usize, r: usize, sums: [i32; 4]| {
                for (k, s) in sums.into_iter().enumerate() {
                    acc[t * rows + r + k] = s - q_sum[t];
                }
            };
            match backend {
                Backend::Avx512 => {
                    for t0 in (0..q.len()).step_by(4) {
                        let group = &q[t0..q.len().min(t0 + 4)];
                        for r in (0..quads).step_by(4) {
                            let w = self.quad(codes, first_row + r);
                            // SAFETY: AVX-512 F/BW/VNNI were detected at run time (`is_available`);
                            // rows and activations were checked above.
                            let sums: &[[i32; 4]] = unsafe {
                                match *group {
                                    [a, b, c, d] => &x86::tile_avx512(w, [a, b, c, d]),
                                    [a, b, c] => &x86::tile_avx512(w, [a, b, c]),
                                    [a, b] => &x86::tile_avx512_masked(w, [a, b]),
                                    [a] => &x86::tile_avx512_masked(w, [a]),
                                    _ => &[],
                                }
                            };
                            for (t, &s) in sums.iter().enumerate() {
                                put(t0 + t, r, s);
                            }
                        }
                    }
                    done = quads;
                }
                Backend::Avx2 => {
                    for t0 in (0..q.len()).step_by(2) {
                        for r in (0..quads).step_by(4) {
                            let w = self.quad(codes, first_row + r);
                            // SAFETY: AVX2 was detected at run time; lengths checked above.
                            if let [a, b] = q[t0..q.len().min(t0 + 2)] {
                                let sums = unsafe { x86::dot4x2_avx2(w, [a, b]) };
                                put(t0, r, sums[0]);
                                put(t0 + 1, r, sums[1]);
                            } else {
                                put(t0, r, unsafe { x86::dot4_avx2(w, q[t0]) });
                            }
                        }
                    }
                    done = quads;
                }
                _ => {}
            }
        }
        for (t, (qt, &s)) in q.iter().zip(q_sum).enumerate() {
            for r in done..rows {
                acc[t * rows + r] = self.dot(first_row + r, qt, backend) - s;
            }
        }
        Ok(())
    }

    /// Weight rows per AMX work unit (two A tiles).
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    pub const AMX_ROWS: usize = 32;

    /// [`Self::gemm_acc_rows`] for the 32 rows `first_row..` and every activation row `q` at
    /// once on AMX, `packed` being `q` in [`amx::pack_acts`]'s layout. The results go to `emit`
    /// ([`Emit`]) 32 activation rows at a time. Where AMX is not [`amx::available`] (or the
    /// layout is ARM's) the AVX-512/AVX2/scalar kernels give the same bits.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    pub fn gemm_amx(
        &self,
        q: &[&[i8]],
        packed: &[u8],
        q_sum: &[i32],
        first_row: usize,
        emit: &mut Emit,
    ) -> Result<(), BitnetError> {
        const R: usize = I2sMatrix::AMX_ROWS;
        let (n, chunks) = (q.len(), self.cols / 64);
        if !(amx::available() && self.layout == I2sLayout::X86) {
            return self.gemm_emit_rows(q, q_sum, first_row, emit);
        }
        check_len("activation sums (one per activation row)", n, q_sum.len())?;
        check_len("packed activations", amx::packed_len(n, self.cols), packed.len())?;
        for qt in q {
            self.check_rows(qt, first_row, R)?;
        }
        self.with_unpacked(first_row, true, |w| {
            let group = |g: usize| &packed[g * chunks * 1024..(g + 1) * chunks * 1024];
            let mut c = [[[0i32; 16]; 16]; 4];
            // Two groups' results, 4 KiB: they stay in L1 until `emit` has them.
            let mut acc = [0i32; 32 * R];
            for g in (0..n.div_ceil(16)).step_by(2) {
                let second = (g + 1 < n.div_ceil(16)).then(|| group(g + 1));
                // SAFETY: AMX is available; `w` holds 2·chunks tiles, each group chunks tiles.
                unsafe { amx::tiles(w, chunks, group(g), second, &mut c) };
                let (first, rows) = (16 * g, (n - 16 * g).min(32));
                for (t, tile) in c.iter().enumerate() {
                    let (h, f) = (t / 2, 16 * (t % 2));
                    if f < rows {
                        let sums = &q_sum[first + f..first + rows.min(f + 16)];
                        // SAFETY: AMX implies AVX-512 F; `acc` holds `rows` runs of 32, and
                        // run f + j + 1 ends past `(f + j)·32 + 16h + 16`.
                        unsafe { amx::columns(tile, sums, &mut acc[f * R + 16 * h..], R) };
                    }
                }
                emit(first, &acc[..rows * R]);
            }
        });
        Ok(())
    }

    /// [`Self::gemm_amx`] without AMX: the 32 rows `first_row..` unpacked to bytes once, then
    /// every activation row `q` against them ([`unpacked`]) on `backend` — AVX-512 VNNI or AVX2
    /// — the results going to `emit` four activation rows at a time. Where that backend is
    /// missing (or the layout is ARM's) the other kernels give the same bits.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    pub fn gemm_unpacked(
        &self,
        q: &[&[i8]],
        q_sum: &[i32],
        backend: Backend,
        first_row: usize,
        emit: &mut Emit,
    ) -> Result<(), BitnetError> {
        const R: usize = unpacked::ROWS;
        let wide = match backend {
            Backend::Avx512 | Backend::Avx2 if backend.is_available() && self.layout == I2sLayout::X86 => {
                backend == Backend::Avx512
            }
            _ => return self.gemm_emit_rows(q, q_sum, first_row, emit),
        };
        check_len("activation sums (one per activation row)", q.len(), q_sum.len())?;
        for qt in q {
            self.check_rows(qt, first_row, R)?;
        }
        self.with_unpacked(first_row, wide, |w| {
            let mut acc = [0i32; 4 * R];
            for (t0, (qs, sums)) in q.chunks(4).zip(q_sum.chunks(4)).enumerate() {
                // SAFETY: the backend's features were detected; `w` is the unpacked block for
                // K, every row K long (checked), `acc` holds 32 per activation row.
                unsafe {
                    if wide {
                        unpacked::block(w, self.cols, qs, sums, &mut acc)
                    } else {
                        unpacked::block_avx2(w, self.cols, qs, sums, &mut acc)
                    }
                };
                emit(4 * t0, &acc[..qs.len() * R]);
            }
        });
        Ok(())
    }

    /// The block GEMMs' fallback: [`Self::gemm_acc_rows`] on the best backend, emitted at once.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    fn gemm_emit_rows(&self, q: &[&[i8]], q_sum: &[i32], first_row: usize, emit: &mut Emit) -> Result<(), BitnetError> {
        let mut acc = alloc::vec![0i32; q.len() * I2sMatrix::AMX_ROWS];
        self.gemm_acc_rows(q, q_sum, Backend::best(), first_row, &mut acc)?;
        emit(0, &acc);
        Ok(())
    }

    /// `f` of the 32 rows `first_row..` unpacked one code per byte ([`unpacked::unpack_block`],
    /// the layout of AMX's A tiles), in a buffer each thread keeps. The caller has checked that
    /// the rows exist and that AVX-512 BW (`wide`) or AVX2 is available.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    fn with_unpacked(&self, first_row: usize, wide: bool, f: impl FnOnce(&[u8])) {
        thread_local! {
            static WEIGHTS: core::cell::RefCell<alloc::vec::Vec<u8>> = const { core::cell::RefCell::new(alloc::vec::Vec::new()) };
        }
        WEIGHTS.with_borrow_mut(|w| {
            w.resize(unpacked::unpacked_len(self.cols), 0);
            let stride = self.cols / 4;
            let codes = &self.codes[first_row * stride..(first_row + unpacked::ROWS) * stride];
            // SAFETY: AVX-512 BW or AVX2 is available (the caller's check); 32 rows of K/4
            // bytes, K a multiple of 128 (`pack`), into 32·K bytes.
            unsafe {
                if wide {
                    unpacked::unpack_block(codes, self.cols, w)
                } else {
                    unpacked::unpack_block_avx2(codes, self.cols, w)
                }
            };
            f(w);
        });
    }

    /// `Σ code·q` of one row, on `backend` (scalar if that backend is not available here).
    fn dot(&self, r: usize, q: &[i8], backend: Backend) -> i32 {
        let codes = self.row_codes(r);
        match (backend, self.layout) {
            #[cfg(target_arch = "x86_64")]
            (Backend::Avx2, I2sLayout::X86) if backend.is_available() => {
                // SAFETY: AVX2 was detected at run time.
                unsafe { x86::dot_avx2(codes, q) }
            }
            #[cfg(target_arch = "x86_64")]
            (Backend::Avx512, I2sLayout::X86) if backend.is_available() => {
                // SAFETY: AVX-512 F/BW/VNNI were detected at run time.
                unsafe { x86::dot_avx512(codes, q) }
            }
            #[cfg(target_arch = "wasm32")]
            (Backend::Simd128, _) => {
                // SAFETY: simd128 is assumed by the wasm build (see Backend::is_available).
                unsafe { simd128::dot(codes, q, self.layout) }
            }
            #[cfg(target_arch = "aarch64")]
            (Backend::Neon, _) => neon::dot(codes, q, self.layout),
            _ => scalar::dot(codes, q, self.layout),
        }
    }

    /// `y = W·x` for one quantised activation row.
    pub fn gemv(&self, acts: &QuantActs, backend: Backend, out: &mut [f32]) -> Result<(), BitnetError> {
        let mut acc = vec![0i32; self.rows];
        self.gemv_acc(&acts.q, backend, &mut acc)?;
        check_len("outputs", self.rows, out.len())?;
        dequantize_into(out, &acc, acts.scale, self.scale);
        Ok(())
    }
}

/// `Σq`: it turns `Σ code·q` into `Σ w·q`, since code = w + 1.
pub fn q_sum(q: &[i8]) -> i32 {
    q.iter().map(|&v| v as i32).sum()
}

#[cfg(test)]
mod tests;
