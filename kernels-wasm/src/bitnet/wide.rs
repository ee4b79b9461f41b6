//! Element-wise loops compiled twice: for the baseline target and again with AVX-512 enabled,
//! the copy chosen at run time. The crate is built for plain x86-64 (SSE2), so without this the
//! compiler vectorises the model's f32 loops (quantisation, the epilogue's division, SiLU, the
//! softmax's `exp`) four lanes wide. Both copies are the same source: the same operations on the
//! same values in the same order (Rust never fuses a multiply and an add, and lane width does
//! not change an element-wise result), so they give the same bits.

/// Whether the AVX-512 copies run here (F, BW, DQ, VL: every AVX-512 CPU since Skylake-X).
/// Every AVX-512 kernel of the crate asks this first, so `SUBSTRATES_NO_AVX512=1` turns all of
/// them off (AMX with them) and the AVX2 paths run: to test and measure those on an AVX-512
/// machine. (Without `std` there is no detection: the baseline code runs.)
pub fn avx512() -> bool {
    // Asked once: the answer is read on every call of every widened loop.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            std::env::var_os("SUBSTRATES_NO_AVX512").is_none_or(|v| v == "0")
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("avx512vl")
        })
    }
    #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
    {
        false
    }
}

/// `wide_fn! { fn name(args) -> ret { body } }`: `name` runs `body` compiled with AVX-512 where
/// [`avx512`] holds, else as compiled for the baseline. `body` and what it calls inline into
/// each copy, so helpers it uses must be `#[inline(always)]` to be widened too.
macro_rules! wide_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                unsafe fn wide($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if $crate::bitnet::wide::avx512() {
                    // SAFETY: the features `wide` was compiled for were detected just now.
                    return unsafe { wide($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use wide_fn;
