//! The CPU engine's thread pool: fixed workers that wait for the next job by spinning briefly, then yielding,
//! then parking (ggml's threadpool idea), so the ~200 matmuls of a decoded token cost no task spawning and no
//! allocation. `run` is a fork-join: every thread (the caller is thread 0) runs the job with its index, and
//! `run` returns when all have finished. Under a competing busy process the yield/park stages give the core
//! back instead of spinning against it.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A job: called once per thread with `(thread index, thread count)`.
type Job<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// How long a waiting thread spins on the job counter before it starts yielding, then parks.
const SPIN: Duration = Duration::from_micros(50);
const YIELD: Duration = Duration::from_millis(2);

struct Shared {
    /// Bumped once per job; a worker runs a job when it sees a new value.
    epoch: AtomicUsize,
    /// The current job, valid while `run` waits (its lifetime erased; see `run`).
    job: UnsafeCell<Option<*const Job<'static>>>,
    /// Workers finished with the current job.
    done: AtomicUsize,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    quit: AtomicBool,
    panicked: AtomicBool,
    /// Threads in the pool, the caller included (set once the workers are started).
    threads: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by `run` while no worker reads it (before the epoch is bumped and after every
// worker reported done), and read by workers only between those two points; everything else is atomic or locked.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced during `run`, which outlives every use.
unsafe impl Send for Shared {}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// One job at a time (the pool is `Sync`).
    running: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `threads` threads in all (the caller of `run` counts as one), at least 1.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: UnsafeCell::new(None),
            done: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            threads: AtomicUsize::new(threads),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::new();
        for index in 1..threads {
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("agentd-cpu-{index}"))
                .spawn(move || worker(&shared, index));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    // The pool works with fewer threads; every job still covers all indices (see `run`).
                    tracing::warn!(error = %e, "could not start a CPU worker thread");
                    break;
                }
            }
        }
        // Fewer than planned if a spawn failed: workers read the count from here, so jobs still cover it all.
        let threads = workers.len() + 1;
        shared.threads.store(threads, Ordering::SeqCst);
        Self {
            shared,
            workers,
            threads,
            running: Mutex::new(()),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job(i, n)` for every thread index `i < n` in parallel and returns when all have returned. A
    /// panic in any of them is re-raised here after the others finished.
    pub fn run(&self, job: &(dyn Fn(usize, usize) + Sync)) {
        let n = self.threads;
        if n == 1 {
            job(0, 1);
            return;
        }
        let _one = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let shared = &*self.shared;
        // SAFETY: the lifetime is erased only for the duration of this call: every worker finishes with the
        // pointer (reports `done`) before this function clears it and returns.
        let erased: *const Job<'static> = unsafe { std::mem::transmute(job as *const Job<'_>) };
        // SAFETY: no worker reads `job` now: the previous job's workers all reported done.
        unsafe { *shared.job.get() = Some(erased) };
        shared.done.store(0, Ordering::SeqCst);
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        if shared.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_all();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(0, n)));
        wait_until(|| shared.done.load(Ordering::Acquire) == n - 1);
        // SAFETY: every worker reported done, so none reads `job` any more.
        unsafe { *shared.job.get() = None };
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a CPU worker thread panicked while running a kernel");
        }
    }

    /// Splits `0..len` into `n` nearly equal contiguous parts and returns part `i` (rounded to `align`).
    pub fn part(len: usize, i: usize, n: usize, align: usize) -> std::ops::Range<usize> {
        let align = align.max(1);
        let units = len.div_ceil(align);
        let start = (units * i / n * align).min(len);
        let end = (units * (i + 1) / n * align).min(len);
        start..end
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Spins, then yields, then sleeps in short steps until `ready()`.
fn wait_until(ready: impl Fn() -> bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !ready() {
        spins = spins.wrapping_add(1);
        // The clock is read once per 128 spins: reading it costs more than a spin.
        if !spins.is_multiple_of(128) {
            std::hint::spin_loop();
            continue;
        }
        let waited = start.elapsed();
        if waited < SPIN {
            std::hint::spin_loop();
        } else if waited < YIELD {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn worker(shared: &Shared, index: usize) {
    let mut seen = 0usize;
    loop {
        // Wait for a new epoch: spin, yield, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if shared.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(128) {
                std::hint::spin_loop();
                continue;
            }
            let waited = start.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < YIELD {
                std::thread::yield_now();
            } else {
                let mut g = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
                shared.sleeping.fetch_add(1, Ordering::SeqCst);
                while shared.epoch.load(Ordering::SeqCst) == seen {
                    g = shared.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                shared.sleeping.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
        seen = shared.epoch.load(Ordering::SeqCst);
        if shared.quit.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: `run` set the job before bumping the epoch and keeps it alive until every worker is done.
        let job = unsafe { *shared.job.get() };
        let threads = shared.threads.load(Ordering::SeqCst);
        if let Some(job) = job {
            // SAFETY: see above: the pointee outlives this call.
            let job = unsafe { &*job };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index, threads)))
                .is_err()
            {
                shared.panicked.store(true, Ordering::SeqCst);
            }
        }
        shared.done.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_runs_once_per_job_and_jobs_see_borrowed_data() {
        for threads in [1, 2, 3, 5] {
            let pool = ThreadPool::new(threads);
            let n = pool.threads();
            for round in 0..200 {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let data = [round; 16];
                pool.run(&|i, total| {
                    assert_eq!(total, n);
                    assert_eq!(data[0], round);
                    hits[i].fetch_add(1, Ordering::SeqCst);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
            }
        }
    }

    #[test]
    fn parked_workers_wake_up() {
        let pool = ThreadPool::new(2);
        std::thread::sleep(Duration::from_millis(20));
        let sum = AtomicUsize::new(0);
        pool.run(&|i, _| {
            sum.fetch_add(i + 1, Ordering::SeqCst);
        });
        assert_eq!(sum.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_panicking_job_is_re_raised_and_the_pool_still_works() {
        let pool = ThreadPool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(&|i, _| {
                if i == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn parts_cover_the_range_without_overlap() {
        for len in [0usize, 1, 7, 64, 100, 896] {
            for n in 1..5 {
                let mut next = 0;
                for i in 0..n {
                    let r = ThreadPool::part(len, i, n, 16);
                    assert_eq!(r.start, next);
                    assert!(r.start.is_multiple_of(16) || r.start == len);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
