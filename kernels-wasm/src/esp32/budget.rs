//! A node's memory: what an assignment of blocks needs in PSRAM and SRAM, checked against the
//! node's budget before any weight moves, and the plan that splits a model across nodes.
//!
//! PSRAM holds the packed weights and norms exactly as they arrive, and the KV cache of every
//! block (f32, `context × kv_dim` keys and as many values). SRAM holds the working set of one
//! forward, counted buffer by buffer as [`crate::bitnet::model::forward`] allocates them, for
//! the batch of rows at hand, plus the receive buffer for one frame and a fixed stack reserve.

use super::msg::TensorMeta;
use super::wire::{HEADER, MAX_PAYLOAD};
use super::Esp32Error;
use crate::bitnet::model::linear::Quant;
use crate::bitnet::model::{Cache, Config};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;
/// Stack and the node program's statics.
pub const STACK_RESERVE: u64 = 32 * KIB;

/// A node's memory, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub sram: u64,
    pub psram: u64,
}

impl Default for Budget {
    /// An ESP32-S3 with the common 8 MiB of PSRAM.
    fn default() -> Budget {
        Budget { sram: 512 * KIB, psram: 8 * MIB }
    }
}

/// What `count` blocks need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub weights: u64,
    pub kv_cache: u64,
    /// SRAM that does not depend on the batch: frame buffer, stack, attention scratch.
    pub sram_fixed: u64,
    /// SRAM per activation row in a batch.
    pub sram_per_row: u64,
}

impl Need {
    pub fn psram(&self) -> u64 {
        self.weights + self.kv_cache
    }

    pub fn sram(&self, rows: u64) -> u64 {
        self.sram_fixed + self.sram_per_row * rows
    }

    /// The most rows one forward may carry within `sram` (and within one frame).
    pub fn max_rows(&self, sram: u64, dim: usize) -> u64 {
        let by_sram = sram.saturating_sub(self.sram_fixed) / self.sram_per_row.max(1);
        let by_frame = (MAX_PAYLOAD as u64 - 8) / (dim as u64 * 4);
        by_sram.min(by_frame)
    }
}

/// The largest table an input row of length `k` needs for the format (the LUT paths build one
/// 16-entry int16 table, split in low and high bytes, per pair or triple of activations).
fn table_bytes(quant: Quant, k: u64) -> u64 {
    match quant {
        Quant::I2s => k,
        Quant::Tl1 => k + k / 2 * 32,
        Quant::Tl2 => k + k.div_ceil(3) * 32 + k / 2 * 32 / 8,
    }
}

/// The memory `count` blocks of `c` need, with `weights` bytes of tensors, for `context` positions.
pub fn need(c: &Config, quant: Quant, count: usize, weights: u64, context: usize) -> Need {
    let (d, kv, f) = (c.dim as u64, c.kv_dim() as u64, c.ffn as u64);
    // Per row, f32: the row itself, the normed copy, q, k, v, the per-head and merged attention
    // outputs and the projection (attention phase); or the normed copy, the attention output
    // kept for the residual, gate and up, and the down projection (FFN phase). Plus the int8
    // activations and the LUT tables of the widest input.
    let attention = d + d + (d + 2 * kv) + d + d + d;
    let ffn = d + d + d + 2 * f + d;
    let per_row = attention.max(ffn) * 4 + table_bytes(quant, d.max(f));
    // One softmax row and one query head at a time.
    let scratch = (context as u64 + c.head_dim() as u64) * 4;
    Need {
        weights,
        kv_cache: Cache::bytes_for(c, count, context),
        sram_fixed: (HEADER + MAX_PAYLOAD + 2) as u64 + STACK_RESERVE + scratch,
        sram_per_row: per_row,
    }
}

/// Refuses an assignment that does not fit, with the numbers.
pub fn check(need: &Need, budget: &Budget, dim: usize, first: usize, count: usize) -> Result<u64, Esp32Error> {
    let layers = format!("blocks {first}..{}", first + count);
    if need.psram() > budget.psram {
        return Err(Esp32Error::Budget(format!(
            "{layers} need {} of PSRAM ({} weights + {} KV cache); the node has {}",
            bytes(need.psram()),
            bytes(need.weights),
            bytes(need.kv_cache),
            bytes(budget.psram)
        )));
    }
    let rows = need.max_rows(budget.sram, dim);
    if rows == 0 {
        return Err(Esp32Error::Budget(format!(
            "{layers} need {} of SRAM for one activation row ({} fixed + {} per row); the node has {}",
            bytes(need.sram(1)),
            bytes(need.sram_fixed),
            bytes(need.sram_per_row),
            bytes(budget.sram)
        )));
    }
    Ok(rows)
}

/// Bytes in KiB/MiB, for messages.
pub fn bytes(b: u64) -> String {
    if b >= MIB {
        format!("{:.2} MiB", b as f64 / MIB as f64)
    } else if b >= KIB {
        format!("{:.1} KiB", b as f64 / KIB as f64)
    } else {
        format!("{b} B")
    }
}

/// The bytes of block tensors, per block.
pub fn block_weights(tensors: &[TensorMeta]) -> u64 {
    tensors.iter().map(|t| t.bytes as u64).sum()
}

/// How many blocks from `first` on fit a node of `budget`; an error if not even one does.
fn fill(
    c: &Config,
    quant: Quant,
    weights: &[u64],
    first: usize,
    context: usize,
    budget: &Budget,
) -> Result<usize, Esp32Error> {
    let mut count = 0;
    while first + count < weights.len() {
        let w = weights[first..=first + count].iter().sum();
        if let Err(e) = check(&need(c, quant, count + 1, w, context), budget, c.dim, first, count + 1) {
            if count == 0 {
                return Err(e);
            }
            break;
        }
        count += 1;
    }
    Ok(count)
}

/// Contiguous block ranges, one per node in order: each node takes as many blocks as fit its
/// budget (a greedy fill: for contiguous ranges no split uses fewer nodes). Nodes left over get
/// empty ranges. `weights[i]` is block i's bytes.
pub fn plan(
    c: &Config,
    quant: Quant,
    weights: &[u64],
    context: usize,
    budgets: &[Budget],
) -> Result<Vec<core::ops::Range<usize>>, Esp32Error> {
    let mut ranges = Vec::new();
    let mut next = 0;
    for (node, budget) in budgets.iter().enumerate() {
        let count = if next < weights.len() {
            fill(c, quant, weights, next, context, budget)
                .map_err(|e| Esp32Error::Budget(format!("node {node} cannot hold even one block: {e}")))?
        } else {
            0
        };
        ranges.push(next..next + count);
        next += count;
    }
    if next < weights.len() {
        let rest: u64 = weights[next..].iter().sum();
        return Err(Esp32Error::Budget(format!(
            "{} nodes hold blocks 0..{next} of {}; blocks {next}..{} ({} of weights) need more nodes",
            budgets.len(),
            weights.len(),
            weights.len(),
            bytes(rest)
        )));
    }
    Ok(ranges)
}

/// The fewest nodes of `budget` that hold the model.
pub fn fewest_nodes(
    c: &Config,
    quant: Quant,
    weights: &[u64],
    context: usize,
    budget: Budget,
) -> Result<usize, Esp32Error> {
    let (mut nodes, mut next) = (0, 0);
    while next < weights.len() {
        next += fill(c, quant, weights, next, context, &budget)?;
        nodes += 1;
    }
    Ok(nodes.max(1))
}

#[cfg(test)]
mod tests {
    use crate::bitnet::model::{Cache, Config, Quant};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The budget's KV cache is the one a node allocates (F16 keys and values), at every size.
    #[test]
    fn the_budgeted_kv_cache_is_the_cache_a_node_allocates() {
        for size in ["tiny", "125M", "1.5B"] {
            let c = Config::dummy(size).expect("a dummy layout");
            for (count, context) in [(1, 16), (3, 64)] {
                let need = super::need(&c, Quant::I2s, count, 0, context);
                assert_eq!(need.kv_cache, Cache::for_layers(&c, count, context).bytes() as u64, "{size}");
            }
        }
    }
}
