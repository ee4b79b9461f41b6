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
    /// Non-zero divisors in ±1 … ±100.
    Divisors {
        seed: u64,
    },
    /// A permutation of `0 .. len`.
    Permutation {
        seed: u64,
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

#[derive(Clone)]
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

const fn full(len: usize, seed: u64) -> Param {
    rand(len, seed, u32::MAX)
}

const S: fn(u32) -> Param = Param::Scalar;

/// Sums of consecutive groups of 4 (a warp's lanes).
fn per_warp(x: &[u32], f: impl Fn(&[u32], usize) -> u32) -> Vec<u32> {
    (0..x.len()).map(|k| f(&x[k / 4 * 4..k / 4 * 4 + 4], k % 4)).collect()
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
        kernel!("vsub_scale", 1, 12, &[rand(11, 12, 1 << 20), rand(11, 13, 1 << 20), zero(11), S(5), S(11)], |a, s| {
            for k in 0..11 {
                a[2][k] = a[0][k].wrapping_sub(a[1][k]).wrapping_mul(s[0]);
            }
        }),
        kernel!("bitwise", 1, 12, &[full(10, 14), full(10, 15), zero(10), S(10)], |a, _| {
            for k in 0..10 {
                a[2][k] = (a[0][k] & a[1][k]) ^ (a[0][k] | !a[1][k]);
            }
        }),
        kernel!("shifts", 1, 12, &[full(10, 16), rand(10, 17, 1000), zero(10), S(10)], |a, _| {
            for k in 0..10 {
                let (v, sh) = (a[0][k], a[1][k] & 31);
                a[2][k] = (v << sh) ^ (v >> (sh & 7)) ^ ((i(v) >> (31 - sh)) as u32);
            }
        }),
        kernel!("minmax", 1, 12, &[rand(9, 18, 1 << 30), rand(9, 19, 1 << 30), zero(9), zero(9), S(9)], |a, _| {
            for k in 0..9 {
                let (x, y) = (i(a[0][k]), i(a[1][k]));
                a[2][k] = x.max(y).wrapping_sub(x.min(y)) as u32;
                a[3][k] = a[0][k].max(a[1][k]);
            }
        }),
        kernel!(
            "divmod",
            1,
            8,
            &[full(8, 20), Param::Array { len: 8, init: Init::Divisors { seed: 21 } }, zero(8), zero(8), zero(8), S(8)],
            |a, _| {
                for k in 0..8 {
                    let (x, y) = (i(a[0][k]), i(a[1][k]));
                    a[2][k] = x.wrapping_div(y) as u32;
                    a[3][k] = x.wrapping_rem(y) as u32;
                    a[4][k] = (a[0][k] / a[1][k]).wrapping_add(a[0][k] % a[1][k]);
                }
            }
        ),
        kernel!("abs_diff", 1, 12, &[rand(10, 22, 2000), rand(10, 23, 2000), zero(10), S(10)], |a, _| {
            for k in 0..10 {
                a[2][k] = i(a[0][k]).abs_diff(i(a[1][k]));
            }
        }),
        kernel!("clamp3", 1, 12, &[rand(12, 24, 300), zero(12), S(50), S(200), S(12)], |a, s| {
            let (lo, hi) = (i(s[0]), i(s[1]));
            for k in 0..12 {
                let v = i(a[0][k]);
                a[1][k] = (if v < lo {
                    lo * 2
                } else if v > hi {
                    hi + v
                } else {
                    v
                }) as u32;
            }
        }),
        kernel!("reverse", 1, 12, &[full(11, 25), zero(11), S(11)], |a, _| {
            for k in 0..11 {
                a[1][10 - k] = a[0][k];
            }
        }),
        kernel!("gather", 1, 12, &[full(10, 26), rand(10, 27, 10), zero(10), S(10)], |a, _| {
            for k in 0..10 {
                a[2][k] = a[0][a[1][k] as usize];
            }
        }),
        kernel!(
            "scatter",
            1,
            12,
            &[full(10, 28), Param::Array { len: 10, init: Init::Permutation { seed: 29 } }, zero(10), S(10)],
            |a, _| {
                for k in 0..10 {
                    let at = a[1][k] as usize;
                    a[2][at] = a[0][k].wrapping_mul(3);
                }
            }
        ),
        kernel!("dot_atomic", 2, 8, &[rand(14, 30, 1000), rand(14, 31, 1000), zero(1), S(14)], |a, _| {
            a[2][0] = (0..14).fold(0u32, |acc, k| acc.wrapping_add(a[0][k].wrapping_mul(a[1][k])));
        }),
        kernel!("warp_allreduce", 1, 12, &[rand(12, 32, 1 << 20), zero(12)], |a, _| {
            a[1] = per_warp(&a[0], |w, _| w.iter().sum());
        }),
        kernel!("warp_scan", 2, 8, &[rand(16, 33, 1000), zero(16)], |a, _| {
            a[1] = per_warp(&a[0], |w, lane| w[..=lane].iter().sum());
        }),
        kernel!("warp_broadcast", 1, 8, &[rand(8, 34, 1000), zero(8), S(6)], |a, s| {
            // The machine's warps are 4 lanes: source lane 6 is lane 6 mod 4.
            let src = s[0] as usize % 4;
            a[1] = per_warp(&a[0], |w, lane| w[src] + w[lane]);
        }),
        kernel!("transpose", 1, 16, &[full(16, 35), zero(16)], |a, _| {
            for t in 0..16 {
                a[1][t] = a[0][(t % 4) * 4 + t / 4];
            }
        }),
        kernel!("bitonic_step", 1, 16, &[rand(16, 36, 1000), S(1), S(2)], |a, s| {
            let (j, k) = (s[0] as usize, s[1] as usize);
            for t in 0..16 {
                let p = t ^ j;
                if p > t && (a[0][t] > a[0][p]) == (t & k == 0) {
                    a[0].swap(t, p);
                }
            }
        }),
        kernel!("bitonic_sort", 1, 16, &[rand(16, 37, 1000), S(16)], |a, _| {
            a[0].sort_unstable();
        }),
        kernel!("nested_loops", 1, 12, &[rand(10, 38, 12), zero(10), S(10)], |a, _| {
            for t in 0..10 {
                let x = a[0][t];
                a[1][t] = (0..x).flat_map(|j| (0..j).map(move |k| j ^ k)).fold(0u32, u32::wrapping_add);
            }
        }),
        kernel!("matmul4", 1, 16, &[rand(16, 39, 100), rand(16, 40, 100), zero(16)], |a, _| {
            for t in 0..16 {
                let (r, c) = (t / 4, t % 4);
                a[2][t] = (0..4).map(|k| a[0][r * 4 + k] * a[1][k * 4 + c]).sum();
            }
        }),
        kernel!("stencil3", 2, 8, &[rand(13, 41, 1000), zero(13), S(13)], |a, _| {
            let x = a[0].clone();
            for t in 0..13 {
                let (l, r) = (if t > 0 { x[t - 1] } else { x[t] }, if t < 12 { x[t + 1] } else { x[t] });
                a[1][t] = l + 2 * x[t] + r;
            }
        }),
        kernel!("count_if", 2, 8, &[rand(15, 42, 100), zero(1), S(50), S(15)], |a, s| {
            a[1][0] = a[0].iter().filter(|&&v| v > s[0]).count() as u32;
        }),
        kernel!("popcount", 1, 12, &[full(12, 43), zero(12), S(12)], |a, _| {
            a[1] = a[0].iter().map(|v| v.count_ones()).collect();
        }),
        kernel!("gcd", 1, 12, &[rand(10, 44, 10000), rand(10, 45, 10000), zero(10), S(10)], |a, _| {
            for t in 0..10 {
                let (mut x, mut y) = (a[0][t], a[1][t]);
                while y != 0 {
                    (x, y) = (y, x % y);
                }
                a[2][t] = x;
            }
        }),
        kernel!("fib", 1, 12, &[rand(12, 46, 1000), zero(12), S(12)], |a, _| {
            for t in 0..12 {
                let (mut x, mut y) = (0u32, 1u32);
                for _ in 0..a[0][t] % 48 {
                    (x, y) = (y, x.wrapping_add(y));
                }
                a[1][t] = x;
            }
        }),
        kernel!("is_prime", 1, 16, &[rand(14, 47, 500), zero(14), S(14)], |a, _| {
            a[1] = a[0]
                .iter()
                .map(|&v| u32::from(v >= 2 && (2..v).take_while(|d| d * d <= v).all(|d| v % d != 0)))
                .collect();
        }),
        kernel!("horner", 1, 8, &[rand(5, 48, 1000), S(4), rand(7, 49, 1000), zero(7), S(7)], |a, s| {
            let deg = s[0] as usize;
            for t in 0..7 {
                a[2][t] = (0..deg).rev().fold(a[0][deg], |acc, k| acc.wrapping_mul(a[1][t]).wrapping_add(a[0][k]));
            }
        }),
        kernel!("sat_add", 1, 12, &[full(10, 50), full(10, 51), zero(10), S(10)], |a, _| {
            for t in 0..10 {
                a[2][t] = i(a[0][t]).saturating_add(i(a[1][t])) as u32;
            }
        }),
        kernel!("select_chain", 1, 12, &[rand(10, 52, 1000), rand(10, 53, 1000), zero(10), S(10)], |a, _| {
            for t in 0..10 {
                let (x, y) = (i(a[0][t]), i(a[1][t]));
                a[2][t] = (if x > y {
                    if x & 1 != 0 {
                        x
                    } else {
                        y
                    }
                } else if y & 2 != 0 {
                    x + y
                } else {
                    x - y
                }) as u32;
            }
        }),
        kernel!("even_odd", 2, 8, &[rand(14, 54, 1000), zero(14), S(14)], |a, _| {
            for t in 0..14 {
                a[1][t] = if t % 2 == 1 { a[0][t] * 2 } else { a[0][t] + 100 };
            }
        }),
        kernel!("sum_squares", 1, 16, &[rand(13, 55, 1000), zero(1), S(13)], |a, _| {
            a[1][0] = a[0].iter().map(|v| v * v).sum();
        }),
        kernel!("argmax", 1, 16, &[rand(13, 56, 50), zero(2), S(13)], |a, _| {
            let best = *a[0].iter().max().unwrap_or(&0);
            a[1] = vec![best, a[0].iter().position(|&v| v == best).unwrap_or(0) as u32];
        }),
        kernel!("xorshift", 1, 12, &[full(10, 57), zero(10), S(10)], |a, _| {
            a[1] = a[0]
                .iter()
                .map(|&v| {
                    (0..3).fold(v, |mut v, _| {
                        v ^= v << 13;
                        v ^= v >> 17;
                        v ^ (v << 5)
                    })
                })
                .collect();
        }),
        kernel!("mulhi", 1, 12, &[full(10, 58), full(10, 59), zero(10), zero(10), S(10)], |a, _| {
            for t in 0..10 {
                a[2][t] = ((i(a[0][t]) as i64 * i(a[1][t]) as i64) >> 32) as u32;
                a[3][t] = a[0][t].wrapping_mul(a[1][t]);
            }
        }),
        kernel!("memory_full", 2, 24, &[full(42, 60), full(42, 61), zero(42), S(42)], |a, _| {
            for t in 0..42 {
                a[2][t] = a[0][t] ^ a[1][t];
            }
            a[0][0] = 7; // c[42] is word 126, which wraps to word 0
        }),
        kernel!("block_sums", 4, 8, &[rand(32, 62, 1000), zero(4)], |a, _| {
            a[1] = a[0].chunks(8).map(|c| c.iter().sum()).collect();
        }),
        kernel!("specials", 3, 8, &[zero(24)], |a, _| {
            a[0] = (0..24).map(|k| (k % 8) + 10 * (k / 8) + 100 * 8 + 1000 * 3).collect();
        }),
        kernel!("shfl_edges", 1, 8, &[rand(8, 63, 1000), zero(8)], |a, _| {
            a[1] = per_warp(&a[0], |w, lane| {
                w[if lane + 1 < 4 { lane + 1 } else { lane }] * 3 + w[lane.checked_sub(2).unwrap_or(lane)]
            });
        }),
        kernel!("find_first", 1, 8, &[rand(12, 64, 6), rand(6, 65, 8), zero(6), S(12), S(6)], |a, _| {
            for t in 0..6 {
                a[2][t] = a[0].iter().position(|&v| v == a[1][t]).unwrap_or(12) as u32;
            }
        }),
        kernel!("countdown", 1, 12, &[rand(12, 66, 100_000), zero(12), S(12)], |a, _| {
            for t in 0..12 {
                let (mut v, mut k) = (a[0][t], 0);
                loop {
                    v /= 2;
                    k += 1;
                    if v < 10 {
                        break;
                    }
                }
                a[1][t] = k * 1000 + v;
            }
        }),
        kernel!("histogram_shared", 2, 16, &[rand(30, 67, 1000), zero(8), S(30)], |a, _| {
            for t in 0..30 {
                let bin = (a[0][t] % 8) as usize;
                a[1][bin] += 1;
            }
        }),
        kernel!("switch_ops", 1, 16, &[rand(14, 68, 1000), full(14, 69), zero(14), S(14)], |a, _| {
            for t in 0..14 {
                let v = a[1][t];
                a[2][t] = match a[0][t] % 6 {
                    0 => v.wrapping_add(11),
                    1 => v.wrapping_mul(3),
                    2 => v ^ 0x5a5a,
                    3 => v >> 3,
                    4 => v.wrapping_sub(7),
                    _ => v | 0x100,
                };
            }
        }),
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
                        Init::Divisors { seed } => {
                            let mut rng = Rng::new(seed);
                            (0..len)
                                .map(|_| {
                                    let v = (rng.next_u64() % 100) as i32 + 1;
                                    (if rng.next_u64().is_multiple_of(2) { v } else { -v }) as u32
                                })
                                .collect()
                        }
                        Init::Permutation { seed } => {
                            let mut rng = Rng::new(seed);
                            let mut p: Vec<u32> = (0..len as u32).collect();
                            for k in (1..len).rev() {
                                p.swap(k, (rng.next_u64() % (k as u64 + 1)) as usize);
                            }
                            p
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

    /// What the arrays must hold afterwards.
    pub fn expected(&self, p: &Prepared) -> Vec<Vec<u32>> {
        let mut arrays = p.arrays.clone();
        (self.reference)(&mut arrays, &p.scalars);
        arrays
    }

    /// A machine ready to run `ptx` (the kernel's own, or an edited one) with this kernel's
    /// launch and inputs.
    pub fn machine(&self, ptx: &str, spec: &MachineSpec) -> Result<(Kernel, Prepared, Machine), String> {
        let kernel = compile(ptx, None, spec).map_err(|e| alloc::format!("{}: {e}", self.name))?;
        if !kernel.data.is_empty() {
            // The suite's launches lay out their own arrays from address 0.
            return Err(alloc::format!(
                "{}: the PTX declares global variables (__device__ or __constant__ data); the suite's launch \
                 has no room for them (`native-host qwengpu run` lays them out)",
                self.name
            ));
        }
        let p = self.prepare();
        let m = Machine::new(*spec, kernel.program.clone(), &p.memory, p.launch.clone())
            .map_err(|e: MachineError| e.to_string())?;
        Ok((kernel, p, m))
    }

    /// Runs on the interpreter and returns the arrays as they end.
    pub fn run_interpreter(&self, spec: &MachineSpec) -> Result<(Vec<Vec<u32>>, u64), String> {
        let (_, p, mut m) = self.machine(self.ptx, spec)?;
        m.run(1_000_000).map_err(|e| e.to_string())?;
        Ok((p.read_arrays(&m.global), m.steps))
    }
}

impl Prepared {
    /// The arrays as `global` memory holds them.
    pub fn read_arrays(&self, global: &[u32]) -> Vec<Vec<u32>> {
        self.arrays.iter().zip(&self.offsets).map(|(a, &o)| global[o..o + a.len()].to_vec()).collect()
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
        assert!(kernels().len() >= 49, "the suite has {} kernels", kernels().len());
        for k in kernels() {
            let p = k.prepare();
            let want = k.expected(&p);
            let (got, steps) = k.run_interpreter(&spec).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, want, "{}", k.name);
            assert!(steps > 0);
        }
    }

    /// The second machine reconverges at the lowest PC, in the ROM order of `layout`. On the
    /// suite's code that gives the plain Rust arrays, and a warp's lanes merge at least where
    /// the IPDOM stack merges them, run on the same ROM: no kernel takes more steps (some take
    /// fewer, where lanes meet before a join). With clang's own block order, `prefix_scan` and
    /// `bitonic_sort` run `bar.sync` with half a warp and give wrong arrays.
    #[test]
    fn the_second_machine_merges_lanes_at_the_lowest_pc() {
        use crate::qwengpu::isa::Reconverge;
        let lowest = MachineSpec::second();
        let stack = MachineSpec { reconverge: Reconverge::Stack, ..lowest };
        let (mut fewer, mut total) = (0, [0u64; 2]);
        for k in kernels() {
            let (_, p, mut m) = k.machine(k.ptx, &lowest).unwrap_or_else(|e| panic!("{e}"));
            let mut on_stack = Machine::new(stack, m.program.clone(), &p.memory, p.launch.clone()).unwrap();
            m.run(1_000_000).unwrap();
            on_stack.run(1_000_000).unwrap();
            assert_eq!(p.read_arrays(&m.global), k.expected(&p), "{}", k.name);
            assert_eq!(p.read_arrays(&on_stack.global), k.expected(&p), "{} (stack)", k.name);
            assert!(
                m.steps <= on_stack.steps,
                "{}: {} steps at the lowest PC, {} on the stack",
                k.name,
                m.steps,
                on_stack.steps
            );
            fewer += usize::from(m.steps < on_stack.steps);
            total[0] += m.steps;
            total[1] += on_stack.steps;
        }
        assert!(fewer > 0, "no kernel merges its lanes earlier at the lowest PC ({total:?} steps)");
    }
}

#[cfg(test)]
mod limits {
    use super::*;
    use crate::qwengpu::isa::{Alu, Inst, Program, Shfl, Space, Src};
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

    /// The second machine's lowering (`MachineSpec::second`: no divider, lanes in turn) gives
    /// every kernel's plain-Rust arrays; where the first machine's ROM has a block that writes
    /// memory and accesses it again, the second's splits it; a hand-made program with such a
    /// block is refused by the machine whose lanes run in turn.
    #[test]
    fn lanes_in_turn_split_blocks_that_write_memory_and_access_it_again_or_shuffle() {
        let (first, second) = (MachineSpec::default(), MachineSpec::second());
        let conflicting = |spec: &MachineSpec, k: &SuiteKernel| {
            let (kernel, _, _) = k.machine(k.ptx, spec).unwrap();
            let blocks = kernel.program.blocks;
            blocks.iter().filter(|b| (1..b.len()).any(|i| b[i].conflicts(&b[..i]))).count()
        };
        let mut split = 0;
        for k in kernels() {
            assert_eq!(k.run_interpreter(&second).unwrap().0, k.expected(&k.prepare()), "{}", k.name);
            assert_eq!(conflicting(&second, &k), 0, "{}", k.name);
            split += conflicting(&first, &k);
        }
        assert!(split > 0, "no suite kernel has a block to split");
        let st = Inst::St { space: Space::Global, a: Src::Imm(0), off: 0, v: Src::Imm(1) };
        let ld = Inst::Ld { space: Space::Global, d: 0, a: Src::Imm(0), off: 0 };
        let program = Program { blocks: alloc::vec![alloc::vec![st, ld, Inst::Exit]] };
        assert!(program.check(&first).is_ok());
        let e = program.check(&second).unwrap_err().to_string();
        assert!(e.contains("block 0 writes memory and accesses it again"), "{e}");
        let loads = Program { blocks: alloc::vec![alloc::vec![ld, ld, st, Inst::Exit]] };
        assert!(loads.check(&second).is_err());
        let one = Program { blocks: alloc::vec![alloc::vec![ld, Inst::Mov { d: 1, a: Src::Imm(2) }, ld, Inst::Exit]] };
        assert!(one.check(&second).is_ok());
        // Shuffles: no block writes a register a shuffle in it reads, before or after it, and a
        // shuffle onto its own source is refused.
        let shfl = |d: u8, a: u8| Inst::Shfl { mode: Shfl::Down, d, a, b: Src::Imm(1) };
        let add = |d: u8| Inst::Alu { op: Alu::Add, d, a: Src::Reg(d), b: Src::Imm(1) };
        for block in [alloc::vec![add(0), shfl(1, 0)], alloc::vec![shfl(1, 0), add(0)], alloc::vec![shfl(0, 0)]] {
            let program = Program { blocks: alloc::vec![block, alloc::vec![Inst::Exit]] };
            assert!(program.check(&first).is_ok());
            let e = program.check(&second).unwrap_err().to_string();
            assert!(e.contains("shuffle"), "{e}");
        }
        let fine = Program { blocks: alloc::vec![alloc::vec![shfl(1, 0), shfl(2, 0), add(1), Inst::Exit]] };
        assert!(fine.check(&second).is_ok());
    }

    #[test]
    fn unsupported_ptx_is_named_by_line() {
        let base = ptx("vadd");
        let swap = |from: &str, to: &str| base.replacen(from, to, 1);
        let cases = [
            (swap("add.s32", "add.f32"), "floating point"),
            (swap("add.s32", "sad.u32"), "not supported"),
            (swap("st.global.u32", "st.global.u16"), "half-words"),
            (swap("add.s32 \t%r", "div.s64 \t%rd9, %rd1, %rd1;\n\tadd.s32 \t%r"), "64-bit division"),
            (swap("ld.global.u32", "ld.local.u32"), "without a local array"),
            (swap("mov.u32 \t%r4, %tid.x", "mov.u32 \t%r4, %warpid"), "not a special register"),
        ];
        // Without a divider too: the division routine must not swallow what the lowering
        // refuses (a 64-bit division above all).
        for spec in [MachineSpec::default(), MachineSpec { divider: false, ..MachineSpec::default() }] {
            for (text, needle) in &cases {
                let e = compile(text, None, &spec).unwrap_err();
                assert!(
                    e.line > 0 && e.to_string().contains(needle),
                    "{e} lacks {needle:?} (divider: {})",
                    spec.divider
                );
            }
        }
    }
}

#[cfg(test)]
mod hostile {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Mangled PTX (lines dropped, duplicated, swapped; tokens replaced) is refused with an
    /// error or runs to an end or the step limit: never a panic or a hang.
    #[test]
    fn mangled_ptx_never_panics() {
        let spec = MachineSpec::default();
        let mut rng = Rng::new(99);
        let words = ["%r1", "%rd2", "%p1", "[%rd1+4]", "0", "-1", "$L__BB0_2", "add.s32", "bra", "@%p1", ",", ";", "]"];
        for (n, k) in kernels().iter().enumerate().cycle().take(400) {
            let mut lines: Vec<String> = k.ptx.lines().map(String::from).collect();
            let len = lines.len() as u64;
            for _ in 0..1 + n % 3 {
                let at = (rng.next_u64() % len) as usize % lines.len().max(1);
                match rng.next_u64() % 4 {
                    0 => {
                        lines.remove(at);
                    }
                    1 => lines.insert(at, lines[at].clone()),
                    2 => {
                        let other = (rng.next_u64() % lines.len() as u64) as usize;
                        lines.swap(at, other);
                    }
                    _ => {
                        let mut parts: Vec<String> = lines[at].split_whitespace().map(String::from).collect();
                        if !parts.is_empty() {
                            let p = (rng.next_u64() % parts.len() as u64) as usize;
                            parts[p] = words[(rng.next_u64() % words.len() as u64) as usize].into();
                        }
                        lines[at] = parts.join(" ");
                    }
                }
            }
            let text = lines.join("\n");
            if let Ok(kernel) = compile(&text, None, &spec) {
                let p = k.prepare();
                if let Ok(mut m) = Machine::new(spec, kernel.program, &p.memory, p.launch.clone()) {
                    let _ = m.run(20_000);
                }
            }
        }
    }
}
