//! What the workers do while the caller works alone: prefetch the start of every thread's part of
//! the next job's weights.
//!
//! A token of generation alternates matrix products, where every thread streams weights, with
//! short serial parts on the caller (norms, quantising the activations, RoPE), where memory
//! idles. The weights of the next product do not depend on the activations, so an idle worker
//! can bring the first [`BUDGET`] bytes of each thread's part toward the cache; those bytes then
//! come from cache, not DRAM, when the product starts, and memory was busy all along.
//!
//! Why prefetch instructions and not loads: a warm job outlives the call that posted it (it runs
//! until the next job cancels it), and the spans are kept as plain addresses. A prefetch never
//! faults and is not a memory access, so an address whose memory has gone meanwhile is harmless.
//! The hint changes no result: it only moves lines between memory and cache.

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes prefetched per thread's part: all of them stay in a worker's L2 (1–2 MiB on the CPUs we
/// run on) with room for what it holds already.
pub const BUDGET: usize = 256 * 1024;

/// A cache line.
const LINE: usize = 64;

/// Lines between checks of the cancel flag: 4 KiB, about a quarter of a microsecond of memory
/// traffic, so a cancelled job frees its worker at once.
const CHECK: usize = 64;

/// Spans (address, length) in the order the next job reads them, and its thread count.
#[derive(Debug)]
pub struct Plan {
    spans: Vec<(usize, usize)>,
    threads: usize,
}

impl Plan {
    pub fn new(spans: &[&[u8]], threads: usize) -> Plan {
        Plan { spans: spans.iter().map(|s| (s.as_ptr() as usize, s.len())).collect(), threads: threads.max(1) }
    }

    fn total(&self) -> usize {
        self.spans.iter().map(|s| s.1).sum()
    }

    /// The address at byte `offset` of the spans laid end to end.
    fn at(&self, mut offset: usize) -> Option<usize> {
        for &(addr, len) in &self.spans {
            if offset < len {
                return Some(addr + offset);
            }
            offset -= len;
        }
        None
    }

    /// The byte ranges (of the spans end to end) that worker `index` prefetches: the first
    /// [`BUDGET`] bytes of the parts of threads `s` with `1 + s % workers == index`, so with
    /// two threads the one worker takes both parts, its own and the caller's.
    pub fn ranges(&self, index: usize) -> Vec<core::ops::Range<usize>> {
        let (total, t) = (self.total(), self.threads);
        let workers = t.saturating_sub(1).max(1);
        (0..t)
            .filter(|s| 1 + s % workers == index)
            .map(|s| {
                let start = s * total / t;
                let end = ((s + 1) * total / t).min(start + BUDGET);
                start..end
            })
            .collect()
    }

    /// Worker `index`'s part, its ranges line by line side by side (the order the threads will
    /// read them), until done or `cancel` is set.
    pub fn prefetch(&self, index: usize, cancel: &AtomicBool) {
        let ranges = self.ranges(index);
        let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
        for (i, offset) in (0..longest).step_by(LINE).enumerate() {
            if i % CHECK == 0 && cancel.load(Ordering::Relaxed) {
                return;
            }
            for r in &ranges {
                if offset < r.len() {
                    if let Some(addr) = self.at(r.start + offset) {
                        prefetch(addr);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn prefetch(addr: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    // SAFETY: prefetch has no precondition on the address (it never faults) and SSE is part of
    // x86-64.
    unsafe { _mm_prefetch::<_MM_HINT_T1>(addr as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
fn prefetch(_addr: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_of_the_next_job_is_warmed_by_one_worker_from_its_start() {
        let (a, b) = (vec![0u8; 3000], vec![0u8; 1000]);
        let plan = Plan::new(&[&a, &b], 2);
        // Two threads: the one worker takes the caller's half and its own.
        assert_eq!(plan.ranges(1), vec![0..2000, 2000..4000]);
        assert_eq!(plan.at(2999), Some(a.as_ptr() as usize + 2999));
        assert_eq!(plan.at(3000), Some(b.as_ptr() as usize));
        assert_eq!(plan.at(4000), None);
        // Four threads, three workers: parts 0 and 3 go to worker 1.
        let plan = Plan::new(&[&a, &b], 4);
        assert_eq!(plan.ranges(1), vec![0..1000, 3000..4000]);
        assert_eq!(plan.ranges(2), vec![1000..2000]);
        assert_eq!(plan.ranges(3), vec![2000..3000]);
        // A long part is cut to the budget.
        let big = vec![0u8; 4 * BUDGET];
        let plan = Plan::new(&[&big], 2);
        assert_eq!(plan.ranges(1), vec![0..BUDGET, 2 * BUDGET..3 * BUDGET]);
    }

    #[test]
    fn a_cancelled_plan_stops_and_a_warmed_pool_still_runs_every_job() {
        let big = vec![1u8; 8 * BUDGET];
        let plan = Plan::new(&[&big], 2);
        plan.prefetch(1, &AtomicBool::new(true));
        plan.prefetch(1, &AtomicBool::new(false));
        let pool = super::super::Pool::new(3).unwrap();
        for round in 0..100 {
            pool.warm(&[&big]);
            if round % 3 == 0 {
                pool.warm(&[&big[..100]]);
            }
            let hits = std::sync::atomic::AtomicUsize::new(0);
            pool.run(&|_| {
                hits.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            assert_eq!(hits.load(Ordering::Relaxed), 3, "round {round}");
        }
        // A warm job left out when the pool goes is stopped by its drop.
        pool.warm(&[&big]);
    }
}
