//! The CPU engine's thread pool: fixed workers that wait for the next job by spinning briefly, then yielding,
//! then parking (ggml's threadpool idea), so the ~200 parallel steps of a decoded token cost no task spawning
//! and no allocation. A job is `n` items (row blocks of a matmul, rows, attention heads) that the threads claim
//! one at a time from a shared counter, the caller (thread 0) included; `run` returns when every item is done.
//!
//! Claiming instead of a fixed split is what keeps a second busy process from stalling every step: a worker
//! the OS has descheduled claims nothing, and the threads that run take its share, so a step waits at most
//! for the one item a preempted thread holds, not for the preempted thread's whole part.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A job: called once per item with `(item, thread index)`; the index (< `threads()`) names per-thread scratch.
type Job<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// How long a waiting thread spins on the job counter before it starts yielding, then parks.
const SPIN: Duration = Duration::from_micros(50);
const YIELD: Duration = Duration::from_millis(2);

struct Shared {
    /// Bumped once per job; a worker looks for work when it sees a new value.
    epoch: AtomicUsize,
    /// The current job, valid while `open` (its lifetime erased; see `run`).
    job: UnsafeCell<Option<*const Job<'static>>>,
    /// Items of the current job, the next unclaimed one, and how many are done (the two counters every thread
    /// writes sit on cache lines of their own).
    items: AtomicUsize,
    next: Padded,
    finished: Padded,
    /// Threads in the pool (the claim size depends on it).
    threads: AtomicUsize,
    /// The current job may be entered.
    open: AtomicBool,
    /// Workers inside the current job (entered, not yet left).
    active: AtomicUsize,
    /// Workers parked on `wake`.
    sleeping: AtomicUsize,
    quit: AtomicBool,
    panicked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written by `run` only while it is closed and no worker is inside (`active == 0`), and read by
// a worker only after it entered (`active` counted) and saw `open` (set after the write, SeqCst); everything
// else is atomic or locked.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced while `run` waits, which outlives every use.
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
            items: AtomicUsize::new(0),
            next: Padded(AtomicUsize::new(0)),
            finished: Padded(AtomicUsize::new(0)),
            threads: AtomicUsize::new(threads),
            open: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
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
                    // The pool works with fewer threads: items are claimed, so the job is covered either way.
                    tracing::warn!(error = %e, "could not start a CPU worker thread");
                    break;
                }
            }
        }
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

    /// Runs `job(item, thread)` once for every `item < items`, spread over the threads, and returns when all
    /// are done. A panic in any of them is re-raised here after the others finished.
    pub fn run(&self, items: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        if self.threads == 1 || items <= 1 {
            for i in 0..items {
                job(i, 0);
            }
            return;
        }
        let _one = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let shared = &*self.shared;
        // SAFETY: the lifetime is erased only for the duration of this call: the job is closed and every worker
        // has left it (`active == 0`) before this function clears the pointer and returns.
        let erased: *const Job<'static> = unsafe { std::mem::transmute(job as *const Job<'_>) };
        // SAFETY: the job is closed and no worker is inside (the previous `run` waited for that).
        unsafe { *shared.job.get() = Some(erased) };
        shared.items.store(items, Ordering::SeqCst);
        shared.next.0.store(0, Ordering::SeqCst);
        shared.finished.0.store(0, Ordering::SeqCst);
        shared.open.store(true, Ordering::SeqCst);
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        if shared.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_all();
        }
        claim(shared, job, 0);
        wait_until(|| shared.finished.0.load(Ordering::Acquire) >= items);
        shared.open.store(false, Ordering::SeqCst);
        wait_until(|| shared.active.load(Ordering::SeqCst) == 0);
        // SAFETY: closed, and no worker is inside: none reads `job` any more.
        unsafe { *shared.job.get() = None };
        if shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a CPU worker thread panicked while running a kernel");
        }
    }
}

/// Claims and runs items of the current job until none are left, a few at a time: about a quarter of a
/// thread's fair share per claim, so the shared counters are touched a handful of times per job while a
/// preempted thread still holds back little. An item whose call panics still counts as finished (the panic is
/// recorded and re-raised by `run`).
fn claim(shared: &Shared, job: &Job<'_>, thread: usize) {
    let items = shared.items.load(Ordering::SeqCst);
    let threads = shared.threads.load(Ordering::Relaxed).max(1);
    let chunk = (items / (threads * 4)).max(1);
    loop {
        let start = shared.next.0.fetch_add(chunk, Ordering::Relaxed);
        if start >= items {
            return;
        }
        let end = (start + chunk).min(items);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in start..end {
                job(i, thread);
            }
        }));
        shared.finished.0.fetch_add(end - start, Ordering::Release);
        if r.is_err() {
            shared.panicked.store(true, Ordering::SeqCst);
        }
    }
}

/// An atomic counter alone on its cache line.
#[repr(align(64))]
struct Padded(AtomicUsize);

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
        shared.active.fetch_add(1, Ordering::SeqCst);
        if shared.open.load(Ordering::SeqCst) {
            // SAFETY: entered (`active` counted) while open: `run` wrote the pointer before opening and keeps
            // the job alive until `active` drops to 0.
            if let Some(job) = unsafe { *shared.job.get() } {
                // SAFETY: see above: the pointee outlives this call.
                claim(shared, unsafe { &*job }, index);
            }
        }
        shared.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_per_job_and_jobs_see_borrowed_data() {
        for threads in [1, 2, 3, 5] {
            let pool = ThreadPool::new(threads);
            let n = pool.threads();
            for round in 0..300 {
                let items = round % 37;
                let hits: Vec<AtomicUsize> = (0..items).map(|_| AtomicUsize::new(0)).collect();
                let data = [round; 16];
                pool.run(items, &|i, thread| {
                    assert!(thread < n);
                    assert_eq!(data[0], round);
                    hits[i].fetch_add(1, Ordering::SeqCst);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
            }
        }
    }

    #[test]
    fn parked_workers_wake_up_and_share_the_items() {
        let pool = ThreadPool::new(2);
        std::thread::sleep(Duration::from_millis(20));
        let by_thread = [AtomicUsize::new(0), AtomicUsize::new(0)];
        pool.run(400, &|_, t| {
            std::thread::sleep(Duration::from_micros(20));
            by_thread[t].fetch_add(1, Ordering::SeqCst);
        });
        let total: usize = by_thread.iter().map(|c| c.load(Ordering::SeqCst)).sum();
        assert_eq!(total, 400);
    }

    #[test]
    fn a_panicking_job_is_re_raised_and_the_pool_still_works() {
        let pool = ThreadPool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(8, &|i, _| {
                if i == 5 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(10, &|_, _| {
            count.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(count.load(Ordering::SeqCst), 10);
    }
}
