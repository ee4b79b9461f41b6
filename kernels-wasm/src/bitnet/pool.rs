//! A persistent thread pool for one mul_mat at a time, like ggml's: workers stay alive between
//! calls and spin briefly before sleeping, because spawning threads per GEMV (~50 µs) costs more
//! than a 768×768 GEMV itself (~10 µs).
//!
//! Between jobs the caller often works alone (a norm, the activations' quantisation), and the
//! workers would only spin. [`Pool::warm`] gives them the next job's weights to stream toward the
//! cache meanwhile, so memory stays busy through the serial parts of a token (see [`warm`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub mod warm;

/// How long a worker polls for the next job before sleeping on the condition variable.
const SPIN: u32 = 20_000;

/// The job of the current epoch.
#[derive(Clone)]
enum Job {
    /// A borrowed closure with its lifetime erased: [`Pool::run`] does not return before every
    /// worker has finished calling it, so the borrow it came from outlives every use.
    Run(*const (dyn Fn(usize) + Sync)),
    /// Spans to prefetch until the next job cancels it.
    Warm(Arc<warm::Plan>),
}
// SAFETY: the `Run` pointee is `Sync`, and it is only dereferenced while `run` keeps it alive.
unsafe impl Send for Job {}

struct Shared {
    epoch: AtomicU64,
    job: Mutex<Option<Job>>,
    wake: Condvar,
    pending: AtomicUsize,
    done: (Mutex<()>, Condvar),
    panicked: AtomicBool,
    stop: AtomicBool,
    /// A warm job is out (its workers count in `pending`).
    warming: AtomicBool,
    /// Tells a warm job to stop at its next check.
    cancel: AtomicBool,
    /// Workers asleep on `wake`, and whether the caller sleeps on `done`: a notification is a
    /// system call (a futex wake, about a microsecond in a VM), and at about 140 jobs and as
    /// many warm hints a token, generation made some 700 of them a token while every thread
    /// was spinning and none needed waking. So only a sleeper is woken.
    sleeping: AtomicUsize,
    caller_asleep: AtomicBool,
}

/// `threads − 1` workers; the caller of [`Pool::run`] is thread 0.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `threads` threads in all (at least 1). Fails only if the OS refuses a thread.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            wake: Condvar::new(),
            pending: AtomicUsize::new(0),
            done: (Mutex::new(()), Condvar::new()),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            warming: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            caller_asleep: AtomicBool::new(false),
        });
        let mut workers = Vec::new();
        for index in 1..threads.max(1) {
            let shared = shared.clone();
            workers.push(
                std::thread::Builder::new().name(format!("bitnet-{index}")).spawn(move || worker(&shared, index))?,
            );
        }
        Ok(Pool { shared, workers })
    }

    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(i)` once on every thread `i` of the pool (the caller is 0) and returns when all
    /// calls have returned. `Err` if any of them panicked (the panic is not propagated).
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) -> Result<(), PoolPanic> {
        let s = &*self.shared;
        self.settle();
        s.panicked.store(false, Ordering::Relaxed);
        if !self.workers.is_empty() {
            // SAFETY: only the lifetime is erased; see `Job`.
            let f = unsafe { core::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f) };
            self.post(Job::Run(f));
        }
        if catch_unwind(AssertUnwindSafe(|| f(0))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        self.wait_idle();
        if s.panicked.load(Ordering::Relaxed) {
            Err(PoolPanic)
        } else {
            Ok(())
        }
    }

    /// Hands `job` to every worker.
    fn post(&self, job: Job) {
        let s = &*self.shared;
        s.pending.store(self.workers.len(), Ordering::Release);
        let mut slot = s.job.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(job);
        s.epoch.fetch_add(1, Ordering::AcqRel);
        drop(slot);
        // A worker counts itself in `sleeping` under the job lock before it checks the epoch
        // and sleeps: it either saw this epoch, or it counted itself before the lock above.
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            s.wake.notify_all();
        }
    }

    /// Lets the workers prefetch the first bytes of what each thread reads next, `spans` in the
    /// order the next job reads them, shared out as its threads will share them (equal parts),
    /// while the caller goes on alone. Returns at once; the next [`Pool::run`] or `warm` stops
    /// it. Nothing happens on one thread.
    pub fn warm(&self, spans: &[&[u8]]) {
        if self.workers.is_empty() || spans.is_empty() {
            return;
        }
        self.settle();
        self.shared.cancel.store(false, Ordering::Relaxed);
        self.shared.warming.store(true, Ordering::Relaxed);
        self.post(Job::Warm(Arc::new(warm::Plan::new(spans, self.threads()))));
    }

    /// Stops a warm job that is out and waits for its workers (each checks every few lines).
    fn settle(&self) {
        let s = &*self.shared;
        if s.warming.load(Ordering::Relaxed) {
            s.cancel.store(true, Ordering::Release);
            self.wait_idle();
            s.warming.store(false, Ordering::Relaxed);
        }
    }

    /// Waits until every worker has finished the current job: spin first (the usual case is a
    /// few microseconds), then sleep. Never spin without bound: when there are more threads than
    /// cores (tests running side by side, a busy machine), the worker we wait for may be the one
    /// our spinning keeps off its core.
    fn wait_idle(&self) {
        let s = &*self.shared;
        let mut spins = 0;
        while s.pending.load(Ordering::Acquire) != 0 {
            if spins < SPIN {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let guard = s.done.0.lock().unwrap_or_else(|e| e.into_inner());
                // Announce the sleep, then check: the last worker decrements `pending`, then
                // looks at `caller_asleep` (both sequentially consistent), so one of the two
                // sees the other. The timeout is a second line of defence, not the mechanism.
                s.caller_asleep.store(true, Ordering::SeqCst);
                if s.pending.load(Ordering::SeqCst) != 0 {
                    drop(s.done.1.wait_timeout(guard, std::time::Duration::from_millis(1)));
                }
                s.caller_asleep.store(false, Ordering::SeqCst);
            }
        }
    }
}

/// A job panicked on some thread of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolPanic;

fn worker(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0;
        while s.epoch.load(Ordering::Acquire) == seen && !s.stop.load(Ordering::Acquire) {
            if spins < SPIN {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let guard = s.job.lock().unwrap_or_else(|e| e.into_inner());
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                if s.epoch.load(Ordering::Acquire) == seen && !s.stop.load(Ordering::Acquire) {
                    drop(s.wake.wait(guard));
                }
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = s.epoch.load(Ordering::Acquire);
        let job = s.job.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let finished = match job {
            // SAFETY: `run` keeps `f` alive until `pending` reaches 0, which needs this call.
            Some(Job::Run(f)) => catch_unwind(AssertUnwindSafe(|| unsafe { (*f)(index) })).is_ok(),
            Some(Job::Warm(plan)) => {
                plan.prefetch(index, &s.cancel);
                true
            }
            None => true,
        };
        if !finished {
            s.panicked.store(true, Ordering::Relaxed);
        }
        if s.pending.fetch_sub(1, Ordering::SeqCst) == 1 && s.caller_asleep.load(Ordering::SeqCst) {
            let _guard = s.done.0.lock().unwrap_or_else(|e| e.into_inner());
            s.done.1.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.settle();
        self.shared.stop.store(true, Ordering::Release);
        {
            let _slot = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_each_job_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads).unwrap();
            for round in 0..200u64 {
                let hits: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
                pool.run(&|i| {
                    hits[i].fetch_add(round + 1, Ordering::Relaxed);
                })
                .unwrap();
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == round + 1),
                    "{threads} threads, round {round}"
                );
            }
        }
    }

    /// Jobs posted after the workers have gone to sleep (a pause longer than their spin) must
    /// wake them: `post` notifies only a counted sleeper, and a lost wake-up would hang here,
    /// which the watchdog turns into a failure.
    #[test]
    fn jobs_after_pauses_wake_sleeping_workers() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = Pool::new(3).unwrap();
            for round in 0..12u64 {
                std::thread::sleep(std::time::Duration::from_millis(if round % 3 == 0 { 30 } else { 2 }));
                let hits = AtomicU64::new(0);
                pool.run(&|i| {
                    // Worker 2 sometimes finishes late, so the caller goes to sleep on `done`.
                    if i == 2 && round % 2 == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    hits.fetch_add(1, Ordering::Relaxed);
                })
                .unwrap();
                assert_eq!(hits.load(Ordering::Relaxed), 3, "round {round}");
            }
            let _ = tx.send(());
        });
        assert!(rx.recv_timeout(std::time::Duration::from_secs(30)).is_ok(), "a worker or the caller was never woken");
    }

    #[test]
    fn a_panicking_job_is_reported_and_the_pool_goes_on() {
        let pool = Pool::new(3).unwrap();
        assert_eq!(pool.run(&|i| assert_ne!(i, 2, "worker 2 fails")), Err(PoolPanic));
        let count = AtomicUsize::new(0);
        pool.run(&|_| {
            count.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 3);
    }
}
