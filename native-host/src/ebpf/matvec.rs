//! Loads and drives `bpf/qwen3_matvec.bpf.c`: `y = W·x` (Q16 × Q24 → Q16) and its argmax, the
//! whole matrix resident in an mmapable map, rows split over threads that run the program at
//! the same time on disjoint rows (one `args` slot each).

use super::sys::{self, MapMemory};
use super::EbpfError;
use libbpf_rs::{MapCore, Object, ObjectBuilder};
use std::os::fd::{AsFd, AsRawFd, RawFd};

const PROGRAM: &str = "qwen3_matvec";
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/qwen3_matvec.bpf.o"));
/// Parallel callers (the `args` map has this many slots).
pub const SLOTS: usize = 2;

/// One loaded matvec program for a fixed `rows × cols` shape.
pub struct Matvec {
    // Keeps the program and maps alive; the mappings below point into its maps.
    _object: Object,
    prog_fd: RawFd,
    pub rows: usize,
    pub cols: usize,
    weights: MapMemory,
    x: MapMemory,
    out: MapMemory,
    args: MapMemory,
    /// Instructions the verifier processed to accept the program.
    pub verified_insns: Option<u32>,
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
    pub fn load(rows: usize, cols: usize) -> Result<Self, EbpfError> {
        if cols == 0 || !cols.is_multiple_of(2) || rows == 0 || rows > u32::MAX as usize / 4 || cols > 1 << 20 {
            return Err(EbpfError::Shape {
                what: "matvec shape (rows ≥ 1, even cols ≤ 2^20)", expected: 2, got: cols
            });
        }
        let load = |source| EbpfError::Load { program: PROGRAM, source };
        let mut open = ObjectBuilder::default().open_memory(OBJECT).map_err(load)?;
        for mut map in open.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let sized = match name.as_str() {
                "weights" => map.set_value_size((cols * 4) as u32).and(map.set_max_entries(rows as u32)),
                "x" => map.set_value_size((cols * 4) as u32),
                "out" => map.set_max_entries(rows as u32),
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
        let weights = MapMemory::new(map_fd("weights")?, rows * cols * 4, "weights")?;
        let x = MapMemory::new(map_fd("x")?, cols * 4, "x")?;
        // Array maps space entries round_up(value_size, 8) apart: each s32 output takes 8 bytes.
        let out = MapMemory::new(map_fd("out")?, rows * 8, "out")?;
        let args = MapMemory::new(map_fd("args")?, SLOTS * 16, "args")?;
        Ok(Matvec {
            verified_insns: sys::verified_insns(prog_fd),
            _object: object,
            prog_fd,
            rows,
            cols,
            weights,
            x,
            out,
            args,
        })
    }

    /// Copies a row-major `rows × cols` Q24 matrix into the kernel's map.
    pub fn set_weights(&mut self, w: &[i32]) -> Result<(), EbpfError> {
        if w.len() != self.rows * self.cols {
            return Err(EbpfError::Shape { what: "weights", expected: self.rows * self.cols, got: w.len() });
        }
        self.weights.as_i32_mut()[..w.len()].copy_from_slice(w);
        Ok(())
    }

    /// Writes rows `first..` of the stacked matrices (`w.len()` a whole number of rows).
    pub fn set_rows(&mut self, first: usize, w: &[i32]) -> Result<(), EbpfError> {
        let rows = w.len() / self.cols;
        if rows * self.cols != w.len() || first + rows > self.rows {
            return Err(EbpfError::Shape {
                what: "weight rows",
                expected: self.rows - first.min(self.rows),
                got: rows,
            });
        }
        self.weights.as_i32_mut()[first * self.cols..][..w.len()].copy_from_slice(w);
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
        if x.len() != self.cols {
            return Err(EbpfError::Shape { what: "x", expected: self.cols, got: x.len() });
        }
        let count = y.len();
        if count == 0 || first + count > self.rows {
            return Err(EbpfError::Shape { what: "row range end", expected: self.rows, got: first + count });
        }
        self.x.as_i32_mut()[..x.len()].copy_from_slice(x);
        let threads = threads.clamp(1, SLOTS).min(count);
        let per = count.div_ceil(threads);
        let shares: Vec<(u32, u32)> =
            (0..threads).map(|t| ((first + t * per) as u32, per.min(count - (t * per).min(count)) as u32)).collect();
        {
            let args = self.args.as_u32_mut();
            for (slot, &(first, count)) in shares.iter().enumerate() {
                args[slot * 4] = first;
                args[slot * 4 + 1] = count;
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
        let args: Vec<u32> = self.args.as_u32_mut()[..SLOTS * 4].to_vec();
        for (slot, result) in results.into_iter().enumerate() {
            let (retval, ns) = result?;
            if retval != 1 {
                return Err(EbpfError::Incomplete { program: PROGRAM, retval });
            }
            stats.calls += 1;
            stats.kernel_ns += ns as u64;
            let (value, row) = (args[slot * 4 + 2] as i32, args[slot * 4 + 3] as usize);
            // Shares are in row order, so strict > keeps the lowest index across them too.
            if shares[slot].1 > 0 && best.is_none_or(|(b, _)| value > b) {
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
