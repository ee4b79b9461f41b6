//! qwen3-ebpf's model arithmetic, in integers: the golden model that the in-kernel BPF programs
//! (`native-host/bpf/`) must match bit for bit, and that the browser can run too.

pub mod fixed;
/// The forward pass needs f64 `powf`/`sin`/`cos` for RoPE's tables: `std` (native and browser).
#[cfg(feature = "std")]
pub mod model;
/// The f32 reference the golden model is measured against (also needs `std`'s f32 maths).
#[cfg(feature = "std")]
pub mod reference;
/// How the kernel stores the matrices (Q24, BF16 + table, INT4 groups).
pub mod weights;
