//! Which SIMD a kernel uses. Chosen at run time from the CPU's features where `std` can detect
//! them; the portable scalar code is always there and is the reference every backend must match.

use alloc::vec::Vec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Plain Rust, `no_std`: the reference, and what microcontrollers run.
    Scalar,
    /// x86-64 AVX2 (`pshufb`, `pmaddubsw`).
    Avx2,
    /// x86-64 AVX-512 BW + VBMI + VNNI (`vpermb`, `vpdpbusd`).
    Avx512,
    /// WebAssembly SIMD (`i8x16.swizzle`).
    Simd128,
    /// AArch64 NEON (`tbl`).
    Neon,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Simd128 => "simd128",
            Backend::Neon => "neon",
        }
    }

    /// Whether this CPU (or wasm engine) can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar => true,
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            Backend::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            Backend::Avx512 => {
                super::wide::avx512()
                    && std::is_x86_feature_detected!("avx512vbmi")
                    && std::is_x86_feature_detected!("avx512vnni")
            }
            // wasm has no run-time feature detection: the simd128 kernels are compiled with
            // `#[target_feature(enable = "simd128")]` and every current browser runs them.
            #[cfg(target_arch = "wasm32")]
            Backend::Simd128 => true,
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => true,
            _ => false,
        }
    }

    /// Every backend this machine can run, scalar first.
    pub fn available() -> Vec<Backend> {
        [Backend::Scalar, Backend::Avx2, Backend::Avx512, Backend::Simd128, Backend::Neon]
            .into_iter()
            .filter(|b| b.is_available())
            .collect()
    }

    /// The fastest available backend.
    pub fn best() -> Backend {
        Backend::available().last().copied().unwrap_or(Backend::Scalar)
    }
}
