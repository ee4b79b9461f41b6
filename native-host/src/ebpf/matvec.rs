//! Loads and drives `bpf/qwen3_matvec.bpf.c`: `y = W·x` (Q16 × Q24 → Q16) and its argmax, the
//! whole matrix resident in an mmapable map, rows split over threads that run the program at
//! the same time on disjoint rows (one `args` slot each).

use super::sys::{self, MapMemory};
use super::EbpfError;
use kernels_wasm::qwen3::weights::{bf16_table, WeightFormat};
use libbpf_rs::{MapCore, Object, ObjectBuilder};
use std::os::fd::{AsFd, AsRawFd, RawFd};

const PROGRAM: &str = "qwen3_matvec";

/// The program built for each weight storage (build.rs).
fn object(format: WeightFormat) -> &'static [u8] {
    match format {
        WeightFormat::Q24 => include_bytes!(concat!(env!("OUT_DIR"), "/qwen3_matvec.bpf.o")),
        WeightFormat::Bf16Table => include_bytes!(concat!(env!("OUT_DIR"), "/qwen3_matvec_bf16.bpf.o")),
        WeightFormat::Int4G128 => include_bytes!(concat!(env!("OUT_DIR"), "/qwen3_matvec_int4.bpf.o")),
    }
}
/// Parallel callers (the `args` map has this many slots).
pub const SLOTS: usize = 2;

/// u32s per `struct args` slot (32 bytes).
const ARGS: usize = 8;
const PRENORM: u32 = 1;
const RESIDUAL: u32 = 2;
const GLU: u32 = 4;

/// What a call fuses around the product (see the C file's flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fuse<'a> {
    /// RMSNorm `x` with these Q20 scales first (`cols` of them).
    pub prenorm: Option<&'a [i32]>,
    /// Add this to the outputs (one per row of the range): a residual connection.
    pub residual: Option<&'a [i32]>,
    /// The rows are (gate, up) pairs; the outputs are `silu(gate) · up`, one per pair.
    pub glu: bool,
}

/// One loaded matvec program for a fixed `rows × cols` shape.
pub struct Matvec {
    // Keeps the program and maps alive; the mappings below point into its maps.
    _object: Object,
    prog_fd: RawFd,
    pub rows: usize,
    pub cols: usize,
    pub format: WeightFormat,
    weights: MapMemory,
    x: MapMemory,
    nw: MapMemory,
    res: MapMemory,
    out: MapMemory,
    args: MapMemory,
    /// Instructions the verifier processed to accept the program.
    pub verified_insns: Option<u32>,
    /// PRENORM's `rms_norm_eps` in Q32 (Qwen3's 1e-6 unless set).
    pub eps_q32: u32,
}

/// What one `run` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    pub argmax: usize,
    /// BPF_PROG_TEST_RUN calls made.
    pub calls: usize,
    /// Sum of the kernel-measured durations of those calls.
    pub kernel_ns: u64,
}

impl Matvec {
    /// A `rows × cols` matrix stored as Q24 words.
    pub fn load(rows: usize, cols: usize) -> Result<Self, EbpfError> {
        Self::load_as(rows, cols, WeightFormat::Q24)
    }

    /// A `rows × cols` matrix in the given storage.
    pub fn load_as(rows: usize, cols: usize, format: WeightFormat) -> Result<Self, EbpfError> {
        if cols == 0 || !cols.is_multiple_of(2) || rows == 0 || rows > u32::MAX as usize / 4 || cols > 1 << 20 {
            return Err(EbpfError::Shape {
                what: "matvec shape (rows ≥ 1, even cols ≤ 2^20)", expected: 2, got: cols
            });
        }
        let load = |source| EbpfError::Load { program: PROGRAM, source };
        let row_bytes = format.row_bytes(cols);
        let mut open = ObjectBuilder::default().open_memory(object(format)).map_err(load)?;
        for mut map in open.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let sized = match name.as_str() {
                "weights" => map.set_value_size(row_bytes as u32).and(map.set_max_entries(rows as u32)),
                "x" | "nw" => map.set_value_size((cols * 4) as u32),
                "out" | "res" => map.set_max_entries(rows as u32),
                n if n.ends_with(".rodata") => {
                    // `const volatile __u32 COLS` is the only read-only variable.
                    if let Some(data) = map.initial_value_mut() {
                        data[..4].copy_from_slice(&(cols as u32).to_ne_bytes());
                    }
                    Ok(())
                }
                _ => Ok(()),
            };
            sized.map_err(load)?;
        }
        let object = open.load().map_err(load)?;
        let prog_fd = object
            .progs()
            .find(|p| p.name() == PROGRAM)
            .map(|p| p.as_fd().as_raw_fd())
            .ok_or(EbpfError::MissingMap { program: PROGRAM, map: "program section" })?;
        let map_fd = |name: &'static str| {
            object
                .maps()
                .find(|m| m.name() == name)
                .map(|m| m.as_fd().as_raw_fd())
                .ok_or(EbpfError::MissingMap { program: PROGRAM, map: name })
        };
        let weights = MapMemory::new(map_fd("weights")?, rows * row_bytes, "weights")?;
        if format == WeightFormat::Bf16Table {
            let mut table = MapMemory::new(map_fd("table")?, 65536 * 4, "table")?;
            table.as_i32_mut()[..65536].copy_from_slice(&bf16_table());
        }
        let x = MapMemory::new(map_fd("x")?, 3 * cols * 4, "x")?;
        let nw = MapMemory::new(map_fd("nw")?, cols * 4, "nw")?;
        let res = MapMemory::new(map_fd("res")?, rows * 8, "res")?;
        // Array maps space entries round_up(value_size, 8) apart: each s32 output takes 8 bytes.
        let out = MapMemory::new(map_fd("out")?, rows * 8, "out")?;
        let args = MapMemory::new(map_fd("args")?, SLOTS * ARGS * 4, "args")?;
        Ok(Matvec {
            verified_insns: sys::verified_insns(prog_fd),
            eps_q32: kernels_wasm::qwen3::fixed::EPS_Q32 as u32,
            _object: object,
            prog_fd,
            rows,
            cols,
            format,
            weights,
            x,
            nw,
            res,
            out,
            args,
        })
    }

    /// Copies a row-major `rows × cols` Q24 matrix into the kernel's map (in its storage).
    pub fn set_weights(&mut self, w: &[i32]) -> Result<(), EbpfError> {
        if w.len() != self.rows * self.cols {
            return Err(EbpfError::Shape { what: "weights", expected: self.rows * self.cols, got: w.len() });
        }
        self.set_rows(0, w)
    }

    /// Writes rows `first..` of the stacked Q24 matrices (`w.len()` a whole number of rows),
    /// encoded in this program's storage.
    pub fn set_rows(&mut self, first: usize, w: &[i32]) -> Result<(), EbpfError> {
        let rows = w.len() / self.cols;
        if rows * self.cols != w.len() || first + rows > self.rows {
            return Err(EbpfError::Shape {
                what: "weight rows",
                expected: self.rows - first.min(self.rows),
                got: rows,
            });
        }
        if self.format == WeightFormat::Q24 {
            self.weights.as_i32_mut()[first * self.cols..][..w.len()].copy_from_slice(w);
            return Ok(());
        }
        let stride = self.format.row_bytes(self.cols);
        let bytes = &mut self.weights.as_bytes_mut()[first * stride..][..rows * stride];
        for (out, row) in bytes.chunks_exact_mut(stride).zip(w.chunks_exact(self.cols)) {
            out.fill(0);
            self.format.encode_row(row, out);
        }
        Ok(())
    }

    /// `y = W·x` on `threads` (1..=SLOTS) threads, each one BPF call over its share of rows.
    pub fn run(&mut self, x: &[i32], y: &mut [i32], threads: usize) -> Result<RunStats, EbpfError> {
        if y.len() != self.rows {
            return Err(EbpfError::Shape { what: "y", expected: self.rows, got: y.len() });
        }
        self.run_rows(x, 0, y, threads)
    }

    /// Rows `first..first + y.len()` of `W·x` (one matrix of several stacked in the map); the
    /// argmax is a row index within that range.
    pub fn run_rows(&mut self, x: &[i32], first: usize, y: &mut [i32], threads: usize) -> Result<RunStats, EbpfError> {
        self.run_fused(x, first, y, threads, Fuse::default())
    }

    /// [`Self::run_rows`] with what [`Fuse`] asks for done in the same call. With `glu` the range
    /// is `2·y.len()` rows of (gate, up) pairs.
    pub fn run_fused(
        &mut self,
        x: &[i32],
        first: usize,
        y: &mut [i32],
        threads: usize,
        fuse: Fuse<'_>,
    ) -> Result<RunStats, EbpfError> {
        if x.len() != self.cols {
            return Err(EbpfError::Shape { what: "x", expected: self.cols, got: x.len() });
        }
        let count = if fuse.glu { 2 * y.len() } else { y.len() };
        if count == 0 || first + count > self.rows {
            return Err(EbpfError::Shape { what: "row range end", expected: self.rows, got: first + count });
        }
        let mut flags = 0;
        if let Some(w) = fuse.prenorm {
            if w.len() != self.cols {
                return Err(EbpfError::Shape { what: "prenorm scales", expected: self.cols, got: w.len() });
            }
            self.nw.as_i32_mut()[..w.len()].copy_from_slice(w);
            flags |= PRENORM;
        }
        if let Some(r) = fuse.residual {
            if r.len() != count || fuse.glu {
                return Err(EbpfError::Shape {
                    what: "residual (one per row, not with GLU)",
                    expected: count,
                    got: r.len(),
                });
            }
            // Array maps space s32 entries 8 bytes apart.
            for (slot, &v) in self.res.as_i32_mut()[2 * first..].chunks_exact_mut(2).zip(r) {
                slot[0] = v;
            }
            flags |= RESIDUAL;
        }
        if fuse.glu {
            flags |= GLU;
        }
        self.x.as_i32_mut()[..x.len()].copy_from_slice(x);
        let threads = threads.clamp(1, SLOTS).min(count);
        // GLU pairs must not straddle two threads.
        let per = count.div_ceil(threads).next_multiple_of(if fuse.glu { 2 } else { 1 });
        let shares: Vec<(u32, u32)> =
            (0..threads).map(|t| ((first + t * per) as u32, per.min(count - (t * per).min(count)) as u32)).collect();
        {
            let args = self.args.as_u32_mut();
            for (slot, &(share_first, share_count)) in shares.iter().enumerate() {
                let a = &mut args[slot * ARGS..(slot + 1) * ARGS];
                a.copy_from_slice(&[share_first, share_count, 0, 0, flags, first as u32, 0, self.eps_q32]);
            }
        }
        let fd = self.prog_fd;
        let results: Vec<Result<(u32, u32), EbpfError>> = std::thread::scope(|s| {
            let handles: Vec<_> =
                (1..threads).map(|slot| s.spawn(move || sys::test_run(fd, slot as u32, PROGRAM))).collect();
            let mut all = vec![sys::test_run(fd, 0, PROGRAM)];
            all.extend(
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or(Err(EbpfError::Incomplete { program: PROGRAM, retval: u32::MAX }))),
            );
            all
        });
        let mut stats = RunStats { argmax: 0, calls: 0, kernel_ns: 0 };
        let mut best = None::<(i32, usize)>;
        let args: Vec<u32> = self.args.as_u32_mut()[..SLOTS * ARGS].to_vec();
        for (slot, result) in results.into_iter().enumerate() {
            let (retval, ns) = result?;
            if retval != 1 {
                return Err(EbpfError::Incomplete { program: PROGRAM, retval });
            }
            stats.calls += 1;
            stats.kernel_ns += ns as u64;
            let (value, row) = (args[slot * ARGS + 2] as i32, args[slot * ARGS + 3] as usize);
            // Shares are in row order, so strict > keeps the lowest index across them too.
            if shares[slot].1 > 0 && !fuse.glu && best.is_none_or(|(b, _)| value > b) {
                best = Some((value, row));
            }
        }
        stats.argmax = best.map(|b| b.1 - first).unwrap_or(0);
        for (r, v) in y.iter_mut().zip(self.out.as_i32()[2 * first..].chunks_exact(2)) {
            *r = v[0];
        }
        Ok(stats)
    }
}
