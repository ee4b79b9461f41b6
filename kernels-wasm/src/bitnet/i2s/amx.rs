//! I2_S prompt processing on Intel AMX (`tdpbusd`): one instruction multiplies a 16×64 tile of
//! unsigned bytes by a 64×16 tile of signed bytes into 16×16 int32 sums, 16 384 products, where
//! AVX-512 VNNI does 64. Used for the weight-row blocks of a GEMM with at least
//! [`MIN_ROWS`] activation rows, when the CPU has AMX-INT8 and Linux grants the tile state.
//!
//! Operands, as the instruction wants them:
//! - **A (weights):** 16 weight rows × 64 codes (`w + 1`, 0..=2) of one K chunk, row-major. A
//!   block of 32 weight rows is unpacked from I2_S once per work unit and serves every activation
//!   row.
//! - **B (activations):** the "VNNI" layout. For a group of 16 activation rows and one K chunk,
//!   tile row `kk` holds, for each activation row n, its four values `4kk..4kk + 4` of the chunk.
//!   Built once per GEMM by [`pack_acts`].
//! - **C:** `C[m][n] = Σ_k code[m][k]·q[n][k]`, exact in int32. As in every I2_S kernel,
//!   `Σ code·q − Σq = Σ w·q`, so the result has the same bits as the scalar reference.
//!
//! Eight tile registers: four C tiles (32 weight rows × 32 activation rows), two A, two B. The
//! tile instructions are written with `asm!`: Rust's AMX intrinsics are not stable. The compiler
//! never allocates tile registers itself, so their contents live from one `asm!` to the next.

use alloc::vec;
use alloc::vec::Vec;
use core::arch::asm;
use core::arch::x86_64::*;

/// Activation rows below which the GEMM stays on VNNI (a B tile is 16 rows; fewer is padding).
pub const MIN_ROWS: usize = 16;

/// K values per tile chunk.
const CHUNK: usize = 64;

/// Bytes of one tile (16 rows × 64 bytes).
const TILE: usize = 16 * CHUNK;

/// Whether this process may run the AMX kernels: the CPU reports AMX-TILE and AMX-INT8 and the
/// kernel grants this process the tile data state (`ARCH_REQ_XCOMP_PERM`). Asked once.
/// `SUBSTRATES_NO_AMX=1` turns it off (to measure or test the VNNI path on an AMX machine), as
/// does `SUBSTRATES_NO_AVX512=1` ([`crate::bitnet::wide::avx512`]).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var_os("SUBSTRATES_NO_AMX").is_some_and(|v| v != "0") {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        // CPUID leaf 7 exists on every x86-64 CPU that has AVX-512 (checked first).
        let has = crate::bitnet::wide::avx512() && {
            let leaf = __cpuid_count(7, 0);
            leaf.edx & (3 << 24) == 3 << 24
        };
        has && request_tile_state()
    })
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: Linux enables the 8 KiB tile state
/// only for processes that ask. The grant is per process, so every later thread has it.
#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: a plain system call with two integer arguments; it touches no memory of ours.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL as isize => ret, in("rdi") ARCH_REQ_XCOMP_PERM,
             in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// Bytes of [`pack_acts`]'s layout for `n` activation rows of K values.
pub fn packed_len(n: usize, k: usize) -> usize {
    n.div_ceil(16) * (k / CHUNK) * TILE
}

/// `q` (activation rows of K values) in the B layout: group g (rows 16g..16g + 16, zeros past
/// the last row), chunk c, 1 KiB each, groups outermost.
pub fn pack_acts(q: &[&[i8]], k: usize) -> Vec<u8> {
    let mut out = vec![0u8; packed_len(q.len(), k)];
    for (rows, part) in q.chunks(16).zip(out.chunks_mut((k / CHUNK) * TILE)) {
        pack_group(rows, k, part);
    }
    out
}

/// One group of at most 16 rows into its `(K/64)·1 KiB` of the B layout (which must be zero
/// where rows are missing).
pub fn pack_group(q: &[&[i8]], k: usize, out: &mut [u8]) {
    for (col, row) in q.iter().enumerate().take(16) {
        for c in 0..k / CHUNK {
            let tile = &mut out[c * TILE..][..TILE];
            for kk in 0..16 {
                let src = &row[c * CHUNK + 4 * kk..][..4];
                for (d, &s) in tile[kk * CHUNK + 4 * col..][..4].iter_mut().zip(src) {
                    *d = s as u8;
                }
            }
        }
    }
}

/// Palette 1, all eight tiles 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = CHUNK as u8; // colsb, little-endian u16
        c[48 + t] = 16; // rows
        t += 1;
    }
    TileConfig(c)
};

/// `Σ code·q` of the 32 weight rows in `w` ([`super::unpacked::unpack_block`]) against activation groups `g0`
/// and, if given, `g1` ([`pack_acts`], one group's `chunks` tiles each): `out[2h + g]` is the C
/// tile of weight half h and group g, 16 weight rows × 16 activation rows (zeros for a missing
/// `g1`).
///
/// # Safety
/// [`available`] returned true; `w` holds `2·chunks` tiles, each group `chunks` tiles.
pub unsafe fn tiles(w: &[u8], chunks: usize, g0: &[u8], g1: Option<&[u8]>, out: &mut [[[i32; 16]; 16]; 4]) {
    let s = CHUNK;
    asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
    asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
    for c in 0..chunks {
        let (a0, a1) = (w.as_ptr().add(c * TILE), w.as_ptr().add((chunks + c) * TILE));
        let b0 = g0.as_ptr().add(c * TILE);
        match g1 {
            Some(g1) => asm!(
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tileloadd tmm5, [{a1} + {s}*1]",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tileloadd tmm7, [{b1} + {s}*1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm1, tmm4, tmm7",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                a0 = in(reg) a0, a1 = in(reg) a1, b0 = in(reg) b0, b1 = in(reg) g1.as_ptr().add(c * TILE),
                s = in(reg) s, options(nostack, readonly)
            ),
            None => asm!(
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tileloadd tmm5, [{a1} + {s}*1]",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm2, tmm5, tmm6",
                a0 = in(reg) a0, a1 = in(reg) a1, b0 = in(reg) b0, s = in(reg) s, options(nostack, readonly)
            ),
        }
    }
    let o = out.as_mut_ptr().cast::<u8>();
    let at = |t: usize| o.add(t * TILE);
    asm!(
        "tilestored [{c0} + {s}*1], tmm0",
        "tilestored [{c1} + {s}*1], tmm1",
        "tilestored [{c2} + {s}*1], tmm2",
        "tilestored [{c3} + {s}*1], tmm3",
        "tilerelease",
        c0 = in(reg) at(0), c1 = in(reg) at(1), c2 = in(reg) at(2), c3 = in(reg) at(3), s = in(reg) s,
        options(nostack)
    );
}

/// C tile `tile` (16 weight rows × 16 activation rows) into `acc`, one run of 16 per activation
/// row: column j (activation row j, `j < sums.len()`) minus `sums[j]` goes to
/// `acc[j·stride..][..16]`. A gather reads each column, where element-wise copies would make
/// 256 scattered stores.
///
/// # Safety
/// AVX-512 F; `acc` holds `(sums.len() − 1)·stride + 16` values.
#[target_feature(enable = "avx512f")]
pub unsafe fn columns(tile: &[[i32; 16]; 16], sums: &[i32], acc: &mut [i32], stride: usize) {
    assert!(sums.len() <= 16 && (sums.is_empty() || acc.len() >= (sums.len() - 1) * stride + 16));
    let rows = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
    for (j, &s) in sums.iter().enumerate() {
        let v = _mm512_i32gather_epi32::<4>(_mm512_add_epi32(rows, _mm512_set1_epi32(j as i32)), tile.as_ptr().cast());
        _mm512_storeu_si512(acc.as_mut_ptr().add(j * stride).cast(), _mm512_sub_epi32(v, _mm512_set1_epi32(s)));
    }
}
