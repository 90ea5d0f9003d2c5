//! The daemon's worker pool: a fixed number of threads (10, the machine's
//! concurrency ceiling) shared by every connection, fed through one
//! channel.
//!
//! Admission happens before a job reaches the pool, so the queue never
//! holds more than the admitted requests of all connections. The pool
//! never drops a job it accepted; a job that panics takes only its own
//! work down (the release profile aborts instead, see SECURITY.md).

use crossbeam_channel::{Sender, unbounded};

/// A unit of work.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The machine-wide number of workers (PROTOCOL.md §5.7, EXEC.md §8).
pub const WORKERS: usize = 10;

/// A fixed set of worker threads.
#[derive(Debug)]
pub struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    /// Starts `workers` threads.
    pub fn new(workers: usize) -> std::io::Result<Pool> {
        let (tx, rx) = unbounded::<Job>();
        for n in 0..workers {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("worker-{n}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })?;
        }
        Ok(Pool { tx })
    }

    /// Queues `job`; false when the pool is gone.
    pub fn submit(&self, job: Job) -> bool {
        self.tx.send(job).is_ok()
    }
}
