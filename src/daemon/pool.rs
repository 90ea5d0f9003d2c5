//! The daemon's worker pool: a fixed number of threads (10, the machine's
//! concurrency ceiling) shared by every connection, fed through one
//! channel, and the threads of their own that running commands get.
//!
//! Admission happens before a job reaches the pool, so the queue never
//! holds more than the admitted requests of all connections. A command
//! holds its thread for as long as it runs, so it never runs on a worker:
//! ten sleeping commands would otherwise leave every file operation
//! waiting. The pool never drops a job it accepted; a job that panics takes
//! only its own work down (the release profile aborts instead, see
//! SECURITY.md).

use std::sync::{Arc, Mutex, PoisonError};

use crate::handoff::{self, Sender};

/// A unit of work.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The machine-wide number of workers (PROTOCOL.md §5.7, EXEC.md §8).
pub const WORKERS: usize = 10;

/// A fixed set of worker threads.
#[derive(Debug)]
pub struct WorkerThreads {
    tx: Sender<Job>,
}

impl WorkerThreads {
    /// Starts `workers` threads.
    pub fn new(workers: usize) -> std::io::Result<WorkerThreads> {
        // Workers park at once when idle (see `handoff`): ten threads
        // spinning between requests cost more CPU than the requests.
        let (tx, rx) = handoff::queue::<Job>();
        for n in 0..workers {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("worker-{n}"))
                .spawn(move || {
                    while let Some(job) = rx.recv() {
                        job();
                    }
                })?;
        }
        Ok(WorkerThreads { tx })
    }

    /// Queues `job`; false when the pool is gone.
    pub fn submit(&self, job: Job) -> bool {
        self.tx.send(job).is_ok()
    }
}

/// Runs `job` on a new thread named `name`, for work that keeps its thread
/// busy for long (a running command; their number is bounded by the
/// command limits, not here). When no thread can be started the job is
/// given back unrun, so the caller can still run it elsewhere.
pub fn spawn_apart(name: &str, job: Job) -> Result<(), Job> {
    let handoff = Arc::new(Mutex::new(Some(job)));
    let theirs = Arc::clone(&handoff);
    let started = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let job = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(job) = job {
                job();
            }
        });
    if started.is_ok() {
        return Ok(());
    }
    match handoff
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        Some(job) => Err(job),
        None => Ok(()),
    }
}
