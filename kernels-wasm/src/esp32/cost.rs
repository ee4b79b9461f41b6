//! What a forward costs on an ESP32-S3: operations counted from the layer shapes, and the
//! modelled time of those operations.
//!
//! Basis (every figure is an assumption a user can change; none was measured on a board):
//! - CPU: Xtensa LX7 at 240 MHz, one core computing.
//! - Weights and KV cache stream from octal PSRAM at 80 MHz DTR: 160 MB/s on the bus at best;
//!   a cache-line refill pays command and address cycles on every 32 bytes, so the model assumes
//!   **40 MB/s** effective. Weights are streamed once per activation row (the node's loop is
//!   row by row: a board has no room to keep a tile's partial sums for many rows).
//! - I2_S maps onto the PIE SIMD: `EE.VMULAS.S8.ACCX` multiplies 16 int8 pairs per cycle; the
//!   model charges **16 ternary multiply-adds per cycle** plus the 2-bit unpacking, **2 cycles
//!   per 16 weights**.
//! - TL1/TL2 have no byte table lookup in PIE, so they run scalar: **4 cycles per lookup**
//!   (load index, load entry, add, loop), and **2 cycles per table entry built**.
//! - f32 multiply-add on the LX7 FPU: **2 cycles** (`madd.s` with its load); exp, sin, cos and
//!   sqrt in software: **60 cycles**.
//! - Compute and PSRAM traffic are added, not overlapped: the LX7 stalls on a cache miss.

use super::msg::Counts;
use crate::bitnet::model::{linear::Quant, Config};

/// The figures of the basis above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    pub clock_hz: u64,
    pub psram_bytes_per_s: u64,
    pub simd_macs_per_cycle: u64,
    pub simd_unpack_cycles_per_16: u64,
    pub lut_cycles: u64,
    pub lut_entry_cycles: u64,
    pub flop_cycles: u64,
    pub transcendental_cycles: u64,
}

impl CostModel {
    pub const fn esp32s3(clock_hz: u64) -> CostModel {
        CostModel {
            clock_hz,
            psram_bytes_per_s: 40_000_000,
            simd_macs_per_cycle: 16,
            simd_unpack_cycles_per_16: 2,
            lut_cycles: 4,
            lut_entry_cycles: 2,
            flop_cycles: 2,
            transcendental_cycles: 60,
        }
    }

    /// Modelled microseconds for `c`. The counts come from the nodes, so any value must give an
    /// answer: the sum is taken in u128 (six u64 products fit) and saturates at u64::MAX
    /// (fuzzing found a node answering `flops = u64::MAX`).
    pub fn micros(&self, c: &Counts) -> u64 {
        let w = |n: u64, cycles: u64| n as u128 * cycles as u128;
        let cycles = c.simd_macs as u128 / self.simd_macs_per_cycle.max(1) as u128
            + w(c.simd_macs / 16, self.simd_unpack_cycles_per_16)
            + w(c.lut_lookups, self.lut_cycles)
            + w(c.lut_entries, self.lut_entry_cycles)
            + w(c.flops, self.flop_cycles)
            + w(c.transcendentals, self.transcendental_cycles);
        let compute = cycles.saturating_mul(1_000_000) / self.clock_hz.max(1) as u128;
        let memory = (c.weight_bytes as u128 + c.kv_bytes as u128) * 1_000_000 / self.psram_bytes_per_s.max(1) as u128;
        u64::try_from(compute + memory).unwrap_or(u64::MAX)
    }
}

/// Modelled microseconds to move `bytes` over a UART at `bps` (8N1: 10 bits a byte); 0 when
/// the link is not throttled.
pub fn link_micros(bytes: u64, bps: u64) -> u64 {
    if bps == 0 {
        0
    } else {
        u64::try_from(bytes as u128 * 10 * 1_000_000 / bps as u128).unwrap_or(u64::MAX)
    }
}

/// Packed bytes of an `m × k` matrix (the scale is a few bytes more; left out).
pub fn packed_bytes(quant: Quant, m: usize, k: usize) -> u64 {
    match quant {
        // 2 bits a weight.
        Quant::I2s | Quant::Tl1 => (m * k / 4) as u64,
        // 5 bits per 3 weights (a 4-bit index and a sign bit).
        Quant::Tl2 => (m * k).div_ceil(3) as u64 * 5 / 8,
    }
}

/// What one block does for `n` rows at positions `start..start + n`.
pub fn block_counts(c: &Config, quant: Quant, n: usize, start: usize) -> Counts {
    let (d, kv, f, hd) = (c.dim as u64, c.kv_dim() as u64, c.ffn as u64, c.head_dim() as u64);
    let mut out = Counts::default();
    let n64 = n as u64;
    for &(m, k) in &[(d, d), (kv, d), (kv, d), (d, d), (f, d), (f, d), (d, f)] {
        out.weight_bytes += packed_bytes(quant, m as usize, k as usize) * n64;
        match quant {
            Quant::I2s => out.simd_macs += m * k * n64,
            Quant::Tl1 => {
                out.lut_lookups += m * k / 2 * n64;
                out.lut_entries += k / 2 * 9 * n64;
            }
            Quant::Tl2 => {
                out.lut_lookups += m * k / 3 * n64;
                out.lut_entries += k / 3 * 14 * n64;
            }
        }
    }
    for i in 0..n as u64 {
        let seen = start as u64 + i + 1;
        // Scores and the weighted sum of values, every head.
        out.flops += 2 * c.heads as u64 * hd * seen;
        out.transcendentals += c.heads as u64 * seen;
        // F16 keys and values read, the new position's written.
        let half = crate::bitnet::model::cache::F16_BYTES as u64;
        out.kv_bytes += 2 * kv * seen * half + 2 * kv * half;
    }
    // Four RMSNorms, RoPE on q and k, the SiLU gate and its product, the residual adds.
    out.flops += n64 * (3 * (3 * d + f) + 3 * (d + kv) + 3 * f + 2 * d);
    // Four norms' square roots, RoPE's sines and cosines for q and k, the SiLU exps.
    out.transcendentals += n64 * (4 + 2 * hd + f);
    out
}
