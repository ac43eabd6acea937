//! A memory budget for one thread's work: the process's global allocator ([`BudgetAllocator`], the system's
//! allocator underneath) counts the bytes a thread allocates while [`run_within`] has given it a budget, and a
//! thread that would go over it stops there — it sleeps for good before the allocation happens, holding no lock
//! of the allocator — while the caller, waiting on another thread, gets an error at once. This is what bounds a
//! chat template (code from whoever made the model file) that builds a string or list doubling in a loop: the
//! interpreter's fuel counts instructions, not bytes. Allocation cannot fail gracefully in Rust (a null pointer
//! aborts the process, an unwinding allocator is undefined behaviour), so the stuck thread and the budget it
//! used are the price of a hostile input; callers refuse to run that input again.
//!
//! Threads without a budget pay one thread-local read per allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

thread_local! {
    /// The budget of this thread in bytes (0: none).
    static LIMIT: Cell<usize> = const { Cell::new(0) };
    /// Bytes allocated (less freed) on this thread since its budget was set.
    static USED: Cell<usize> = const { Cell::new(0) };
    /// Set when this thread goes over its budget (points into the `Arc` its `run_within` holds).
    static OVER: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

/// The global allocator: the system's, counting the allocations of threads with a budget.
pub struct BudgetAllocator;

#[inline]
fn charge(bytes: usize) {
    let Ok(limit) = LIMIT.try_with(Cell::get) else {
        return;
    };
    if limit == 0 {
        return;
    }
    let used = USED.with(Cell::get).saturating_add(bytes);
    USED.with(|u| u.set(used));
    if used > limit {
        // Nothing this thread does from here may be charged again (sleeping does not allocate).
        LIMIT.with(|l| l.set(0));
        let flag = OVER.with(Cell::get);
        if !flag.is_null() {
            // SAFETY: the flag is an `Arc<AtomicBool>` the closure of `run_within` keeps alive on this thread,
            // which never returns from here.
            unsafe { (*flag).store(true, Ordering::SeqCst) };
        }
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

#[inline]
fn refund(bytes: usize) {
    if let Ok(limit) = LIMIT.try_with(Cell::get) {
        if limit != 0 {
            USED.with(|u| u.set(u.get().saturating_sub(bytes)));
        }
    }
}

// SAFETY: every call goes to `System` with the same layout; the bookkeeping around it neither allocates nor
// unwinds.
unsafe impl GlobalAlloc for BudgetAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            refund(layout.size() - new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// Why work run with a budget did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// It would have allocated more than its budget.
    Memory,
    /// It ran past its time.
    Time,
    /// Its thread could not be started, or panicked.
    Failed,
}

/// Runs `work` on a new thread whose allocations may total at most `bytes` (net of what it frees), waiting at
/// most `time` for it. Over either, the thread is left behind (asleep, or still running) and the caller gets
/// the reason. Only works when [`BudgetAllocator`] is the global allocator (it is, in this crate); otherwise the
/// memory budget is not enforced.
pub fn run_within<T: Send + 'static>(
    bytes: usize,
    time: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Exceeded> {
    let over = Arc::new(AtomicBool::new(false));
    let flag = over.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("agentd-budgeted".into())
        .spawn(move || {
            OVER.with(|o| o.set(Arc::as_ptr(&flag)));
            USED.with(|u| u.set(0));
            LIMIT.with(|l| l.set(bytes.max(1)));
            let out = work();
            LIMIT.with(|l| l.set(0));
            OVER.with(|o| o.set(std::ptr::null()));
            let _ = tx.send(out);
            drop(flag);
        })
        .map_err(|_| Exceeded::Failed)?;
    let deadline = std::time::Instant::now() + time;
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(out) => return Ok(out),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(Exceeded::Failed),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if over.load(Ordering::SeqCst) {
                    return Err(Exceeded::Memory);
                }
                if std::time::Instant::now() >= deadline {
                    return Err(Exceeded::Time);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_within_its_budget_finishes_and_work_over_it_is_stopped() {
        let ok = run_within(64 << 20, Duration::from_secs(10), || {
            let v = vec![1u8; 1 << 20];
            v.len()
        });
        assert_eq!(ok, Ok(1 << 20));
        // Doubling a string stops at the budget, long before the machine's memory.
        let started = std::time::Instant::now();
        let over = run_within(32 << 20, Duration::from_secs(30), || {
            let mut s = String::from("x");
            for _ in 0..64 {
                s = format!("{s}{s}");
            }
            s.len()
        });
        assert_eq!(over, Err(Exceeded::Memory));
        assert!(started.elapsed() < Duration::from_secs(10));
        // Work past its time is left behind.
        let slow = run_within(1 << 20, Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_millis(500))
        });
        assert_eq!(slow, Err(Exceeded::Time));
    }
}
