//! Admission: how many requests may generate at once (`max_running`; 1 for the local engine, which runs one
//! sequence at a time) and how many may wait for a turn (`max_queue`). A request beyond both is refused at once
//! with 503 and `Retry-After`. The counts feed the `vllm:num_requests_running` / `vllm:num_requests_waiting`
//! gauges; a waiting request gives up its place when its client goes away (the handler is dropped) or when the
//! server shuts down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::ApiError;

/// The bounded queue in front of the model.
pub struct Admission {
    slots: Arc<Semaphore>,
    max_queue: usize,
    waiting: AtomicUsize,
    running: AtomicUsize,
    retry_after_secs: u64,
}

impl Admission {
    pub fn new(max_running: usize, max_queue: usize, retry_after_secs: u64) -> Arc<Self> {
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(max_running.max(1))),
            max_queue,
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            retry_after_secs: retry_after_secs.max(1),
        })
    }

    /// Requests generating now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Requests waiting for a turn.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Takes a place in the queue, or refuses with 503 when the queue is full. Await the ticket for the slot.
    pub fn enter(self: &Arc<Self>) -> Result<Ticket, ApiError> {
        let mut current = self.waiting.load(Ordering::Relaxed);
        loop {
            // A free slot admits even when the queue bound is 0.
            if current >= self.max_queue && self.slots.available_permits() == 0 {
                return Err(ApiError::unavailable(
                    format!(
                        "the server is saturated: {} requests running and {current} waiting (max_queue {}); \
                         retry later",
                        self.running(),
                        self.max_queue
                    ),
                    self.retry_after_secs,
                ));
            }
            match self.waiting.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        Ok(Ticket {
            admission: self.clone(),
            arrived: Instant::now(),
            counted: true,
        })
    }

    /// A slot now, when one is free (nobody has to queue); `None` otherwise.
    pub fn try_admit(self: &Arc<Self>) -> Option<Permit> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        self.running.fetch_add(1, Ordering::AcqRel);
        Some(Permit {
            admission: self.clone(),
            _slot: slot,
            queued: Duration::ZERO,
        })
    }

    /// Enters and waits for a slot in one step (503 when the queue is full or the server stops meanwhile).
    pub async fn admit(self: &Arc<Self>, shutdown: &CancellationToken) -> Result<Permit, ApiError> {
        self.enter()?.wait(shutdown).await
    }
}

/// A place in the queue. Dropping it leaves the queue.
pub struct Ticket {
    admission: Arc<Admission>,
    arrived: Instant,
    counted: bool,
}

impl Ticket {
    /// Waits for a slot; 503 if the server starts shutting down first.
    pub async fn wait(mut self, shutdown: &CancellationToken) -> Result<Permit, ApiError> {
        let slots = self.admission.slots.clone();
        let permit = tokio::select! {
            p = slots.acquire_owned() => p.map_err(|_| ApiError::unavailable("the server is shutting down", 1))?,
            () = shutdown.cancelled() => {
                return Err(ApiError::unavailable("the server is shutting down", 1));
            }
        };
        self.admission.waiting.fetch_sub(1, Ordering::AcqRel);
        self.counted = false;
        self.admission.running.fetch_add(1, Ordering::AcqRel);
        Ok(Permit {
            admission: self.admission.clone(),
            _slot: permit,
            queued: self.arrived.elapsed(),
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.counted {
            self.admission.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A running request's slot, released when dropped (when its response ends or its client goes away).
pub struct Permit {
    admission: Arc<Admission>,
    _slot: OwnedSemaphorePermit,
    queued: Duration,
}

impl Permit {
    /// How long the request waited for its slot.
    pub fn queued(&self) -> Duration {
        self.queued
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounds_the_queue_and_counts() {
        let a = Admission::new(1, 1, 2);
        let stop = CancellationToken::new();
        let first = a.admit(&stop).await.unwrap();
        assert_eq!((a.running(), a.waiting()), (1, 0));
        let queued = a.enter().unwrap();
        assert_eq!(a.waiting(), 1);
        let refused = a.enter().err().unwrap();
        assert_eq!(refused.status.as_u16(), 503);
        assert_eq!(refused.retry_after, Some(2));
        let waiter = tokio::spawn({
            let stop = stop.clone();
            async move { queued.wait(&stop).await.map(|p| p.queued()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(waiter.await.unwrap().unwrap() >= Duration::from_millis(10));
        assert_eq!((a.running(), a.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_dropped_ticket_leaves_and_shutdown_refuses() {
        let a = Admission::new(1, 4, 1);
        let stop = CancellationToken::new();
        let held = a.admit(&stop).await.unwrap();
        drop(a.enter().unwrap());
        assert_eq!(a.waiting(), 0);
        let t = a.enter().unwrap();
        stop.cancel();
        assert_eq!(t.wait(&stop).await.err().unwrap().status.as_u16(), 503);
        assert_eq!(a.waiting(), 0);
        drop(held);
        assert_eq!(a.running(), 0);
    }
}
