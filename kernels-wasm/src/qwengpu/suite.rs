//! The kernel suite: CUDA kernels in `assets/kernels/` with their committed PTX (clang-19's
//! output), a launch each, deterministic inputs, and a plain Rust version of each kernel written
//! from the CUDA source, independently of the machine, that says what every array must hold.

use super::interp::{Launch, Machine, MachineError};
use super::isa::MachineSpec;
use super::lower::{compile, Kernel};
use crate::bitnet::random::Rng;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// How an array starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    Zero,
    /// Values `0 .. modulo` from a seeded generator.
    Random {
        seed: u64,
        modulo: u32,
    },
}

/// A kernel parameter: an array in global memory (its byte address is passed) or a scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Array { len: usize, init: Init },
    Scalar(u32),
}

/// What every array holds after the kernel, from the initial arrays and the scalars.
pub type Reference = fn(&mut [Vec<u32>], &[u32]);

pub struct SuiteKernel {
    pub name: &'static str,
    pub cuda: &'static str,
    pub ptx: &'static str,
    pub grid: usize,
    pub block: usize,
    pub params: Vec<Param>,
    pub reference: Reference,
}

macro_rules! kernel {
    ($name:literal, $grid:expr, $block:expr, $params:expr, $reference:expr) => {
        SuiteKernel {
            name: $name,
            cuda: include_str!(concat!("../../../assets/kernels/", $name, ".cu")),
            ptx: include_str!(concat!("../../../assets/kernels/", $name, ".ptx")),
            grid: $grid,
            block: $block,
            params: $params.to_vec(),
            reference: $reference,
        }
    };
}

const fn rand(len: usize, seed: u64, modulo: u32) -> Param {
    Param::Array { len, init: Init::Random { seed, modulo } }
}

const fn zero(len: usize) -> Param {
    Param::Array { len, init: Init::Zero }
}

fn i(v: u32) -> i32 {
    v as i32
}

/// Every kernel of the suite. (The references index like the CUDA they mirror.)
#[allow(clippy::needless_range_loop)]
pub fn kernels() -> Vec<SuiteKernel> {
    vec![
        kernel!("vadd", 1, 16, &[rand(14, 1, u32::MAX), rand(14, 2, u32::MAX), zero(14), Param::Scalar(14)], |a, s| {
            for k in 0..s[0] as usize {
                a[2][k] = a[0][k].wrapping_add(a[1][k]);
            }
        }),
        kernel!("saxpy", 2, 8, &[Param::Scalar(7), rand(13, 3, 1000), rand(13, 4, 1000), Param::Scalar(13)], |a, s| {
            for k in 0..s[1] as usize {
                a[1][k] = s[0].wrapping_mul(a[0][k]).wrapping_add(a[1][k]);
            }
        }),
        kernel!("reduce_shared", 3, 16, &[rand(40, 5, 100_000), zero(1), Param::Scalar(40)], |a, s| {
            a[1][0] = a[0][..s[0] as usize].iter().fold(0u32, |x, &y| x.wrapping_add(y));
        }),
        kernel!("histogram", 2, 16, &[rand(30, 6, 1000), zero(7), Param::Scalar(30), Param::Scalar(7)], |a, s| {
            for k in 0..s[0] as usize {
                let bin = (a[0][k] % s[1]) as usize;
                a[1][bin] += 1;
            }
        }),
        kernel!("warp_sum", 2, 8, &[rand(16, 7, 1 << 20), zero(4)], |a, _| {
            for w in 0..4 {
                a[1][w] = a[0][4 * w..4 * w + 4].iter().fold(0u32, |x, &y| x.wrapping_add(y));
            }
        }),
        kernel!("collatz", 1, 12, &[rand(12, 8, 60), zero(12), Param::Scalar(12)], |a, s| {
            for k in 0..s[0] as usize {
                let (mut v, mut n) = (a[0][k], 0);
                while v > 1 && n < 200 {
                    v = if v % 2 == 1 { v.wrapping_mul(3).wrapping_add(1) } else { v / 2 };
                    n += 1;
                }
                a[1][k] = n;
            }
        }),
        kernel!("prefix_scan", 1, 16, &[rand(13, 9, 1000), zero(13), Param::Scalar(13)], |a, s| {
            let mut acc = 0u32;
            for k in 0..s[0] as usize {
                acc = acc.wrapping_add(a[0][k]);
                a[1][k] = acc;
            }
        }),
        kernel!(
            "matvec",
            1,
            8,
            &[rand(42, 10, 200), rand(7, 11, 200), zero(6), Param::Scalar(6), Param::Scalar(7)],
            |a, s| {
                let (rows, cols) = (s[0] as usize, s[1] as usize);
                for r in 0..rows {
                    let acc =
                        (0..cols).fold(0i32, |acc, c| acc.wrapping_add(i(a[0][r * cols + c]).wrapping_mul(i(a[1][c]))));
                    a[2][r] = acc as u32;
                }
            }
        ),
    ]
}

/// A kernel's launch: its initial arrays, scalars, global memory image and parameters.
pub struct Prepared {
    pub arrays: Vec<Vec<u32>>,
    pub scalars: Vec<u32>,
    /// Word offset of each array in global memory.
    pub offsets: Vec<usize>,
    pub memory: Vec<u32>,
    pub launch: Launch,
}

impl SuiteKernel {
    pub fn prepare(&self) -> Prepared {
        let (mut arrays, mut scalars, mut offsets, mut params) = (vec![], vec![], vec![], vec![]);
        let mut memory = Vec::new();
        for p in &self.params {
            match *p {
                Param::Array { len, init } => {
                    let values: Vec<u32> = match init {
                        Init::Zero => vec![0; len],
                        Init::Random { seed, modulo } => {
                            let mut rng = Rng::new(seed);
                            (0..len).map(|_| (rng.next_u64() % modulo as u64) as u32).collect()
                        }
                    };
                    offsets.push(memory.len());
                    params.push(4 * memory.len() as u32);
                    memory.extend_from_slice(&values);
                    arrays.push(values);
                }
                Param::Scalar(v) => {
                    scalars.push(v);
                    params.push(v);
                }
            }
        }
        Prepared { arrays, scalars, offsets, memory, launch: Launch { grid: self.grid, block: self.block, params } }
    }

    pub fn compile(&self, spec: &MachineSpec) -> Result<Kernel, String> {
        compile(self.ptx, None, spec).map_err(|e| alloc::format!("{}: {e}", self.name))
    }

    /// What the arrays must hold afterwards.
    pub fn expected(&self, p: &Prepared) -> Vec<Vec<u32>> {
        let mut arrays = p.arrays.clone();
        (self.reference)(&mut arrays, &p.scalars);
        arrays
    }

    /// Runs on the interpreter and returns the arrays as they end.
    pub fn run_interpreter(&self, spec: &MachineSpec) -> Result<(Vec<Vec<u32>>, u64), String> {
        let kernel = self.compile(spec)?;
        let p = self.prepare();
        let mut m = Machine::new(*spec, kernel.program, &p.memory, p.launch.clone())
            .map_err(|e: MachineError| e.to_string())?;
        m.run(1_000_000).map_err(|e| e.to_string())?;
        let arrays = p.arrays.iter().zip(&p.offsets).map(|(a, &o)| m.global[o..o + a.len()].to_vec()).collect();
        Ok((arrays, m.steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_kernel_runs_on_the_interpreter_like_its_plain_rust_version() {
        let spec = MachineSpec::default();
        for k in kernels() {
            let p = k.prepare();
            let want = k.expected(&p);
            let (got, steps) = k.run_interpreter(&spec).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, want, "{}", k.name);
            assert!(steps > 0);
        }
    }
}

#[cfg(test)]
mod limits {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn ptx(name: &str) -> &'static str {
        kernels().into_iter().find(|k| k.name == name).map(|k| k.ptx).unwrap_or_default()
    }

    /// The machine's sizes are compiler parameters: a smaller machine refuses the same kernel
    /// by PTX line and limit, a larger one takes it.
    #[test]
    fn kernels_beyond_the_machine_are_refused_by_line_and_limit() {
        let small = |f: fn(&mut MachineSpec)| {
            let mut spec = MachineSpec::default();
            f(&mut spec);
            spec
        };
        let e = compile(ptx("matvec"), None, &small(|s| s.rom_blocks = 4)).unwrap_err();
        assert!(e.line > 0 && e.what.contains("ROM's 4 blocks"), "{e}");
        let e = compile(ptx("matvec"), None, &small(|s| s.regs = 5)).unwrap_err();
        assert!(e.line > 0 && e.what.contains("too many live registers"), "{e}");
        let e = compile(ptx("reduce_shared"), None, &small(|s| s.shared_words = 8)).unwrap_err();
        assert!(e.what.contains("64 bytes of shared memory; the machine has 32"), "{e}");
        // A wider machine: more registers and ROM compile and run the same kernel.
        let big = small(|s| {
            s.regs = 31;
            s.rom_blocks = 64
        });
        let k = kernels().into_iter().find(|k| k.name == "matvec").unwrap();
        let p = k.prepare();
        assert_eq!(k.run_interpreter(&big).unwrap().0, k.expected(&p));
    }

    #[test]
    fn unsupported_ptx_is_named_by_line() {
        let base = ptx("vadd");
        let swap = |from: &str, to: &str| base.replacen(from, to, 1);
        let cases = [
            (swap("add.s32", "add.f32"), "floating point"),
            (swap("add.s32", "popc.b32"), "not supported"),
            (swap("ld.global.u32", "ld.local.u32"), "local state space"),
            (swap("mov.u32 \t%r4, %tid.x", "mov.u32 \t%r4, %tid.y"), "one-dimensional"),
        ];
        for (text, needle) in cases {
            let e = compile(&text, None, &MachineSpec::default()).unwrap_err();
            assert!(e.line > 0 && e.to_string().contains(needle), "{e} lacks {needle:?}");
        }
    }
}
