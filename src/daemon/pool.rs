//! The daemon's worker pool: a fixed number of threads (10, the machine's
//! concurrency ceiling) shared by every connection, fed through one
//! channel, and the threads of their own that running commands get (kept
//! for the next command once one ends).
//!
//! Admission happens before a job reaches the pool, so the queue never
//! holds more than the admitted requests of all connections. A command
//! holds its thread for as long as it runs, so it never runs on a worker:
//! ten sleeping commands would otherwise leave every file operation
//! waiting. The pool never drops a job it accepted; a job that panics takes
//! only its own work down (the release profile aborts instead, see
//! SECURITY.md).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

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

/// Threads kept for [`spawn_apart`] once their job is done, each waiting
/// for the next. At most [`WORKERS`], the most commands that run at once;
/// a thread finding the list full ends instead.
static PARKED: Mutex<Vec<Arc<Parked>>> = Mutex::new(Vec::new());

/// Where a thread of [`spawn_apart`] finds its next job: handed over at
/// its start, or while it waits parked.
struct Parked {
    job: Mutex<Option<Job>>,
    given: Condvar,
}

impl Parked {
    fn give(&self, job: Job) {
        *lock(&self.job) = Some(job);
        self.given.notify_one();
    }

    /// Waits for a job to be given.
    fn take(&self) -> Job {
        let mut slot = lock(&self.job);
        loop {
            if let Some(job) = slot.take() {
                return job;
            }
            slot = self
                .given
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The locks only guard moves of values in and out; a panic elsewhere
    // cannot leave that half done.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `job` on a thread of its own (named `command`), for work that
/// keeps its thread busy for long (a running command; their number is
/// bounded by the command limits, not here). A thread that ran such a job
/// before and is waiting for another takes it; otherwise a new one starts:
/// starting and ending a thread per command cost every command tens of
/// microseconds. When no thread can be had the job is given back unrun,
/// so the caller can still run it elsewhere.
pub fn spawn_apart(job: Job) -> Result<(), Job> {
    let parked = lock(&PARKED).pop();
    if let Some(parked) = parked {
        parked.give(job);
        return Ok(());
    }
    let slot = Arc::new(Parked {
        job: Mutex::new(Some(job)),
        given: Condvar::new(),
    });
    let theirs = Arc::clone(&slot);
    let started = std::thread::Builder::new()
        .name("command".to_owned())
        .spawn(move || run_apart(&theirs));
    match started {
        Ok(_) => Ok(()),
        // Not started: the job is still in the slot.
        Err(_) => lock(&slot.job).take().map_or(Ok(()), Err),
    }
}

/// The life of a thread of [`spawn_apart`]: the job in `slot`, then every
/// job given to it while parked, until the list of parked threads is full.
fn run_apart(slot: &Arc<Parked>) {
    loop {
        (slot.take())();
        let mut list = lock(&PARKED);
        if list.len() >= WORKERS {
            return;
        }
        list.push(Arc::clone(slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    /// Runs a job apart that reports its thread, and waits for its end.
    fn thread_of_a_job_apart() -> ThreadId {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(std::thread::current().id());
        });
        assert!(spawn_apart(job).is_ok(), "no thread for the job");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the job ran")
    }

    /// Waits until some thread is parked (the job's thread parks after
    /// reporting).
    fn wait_for_a_parked_thread() {
        let until = Instant::now() + Duration::from_secs(10);
        while lock(&PARKED).is_empty() {
            assert!(Instant::now() < until, "no thread parked");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_thread_whose_job_ended_runs_the_next_job_apart() {
        // Other tests in this binary may start or take parked threads in
        // between; one of a few attempts must see the reuse.
        let reused = (0..5).any(|_| {
            let first = thread_of_a_job_apart();
            wait_for_a_parked_thread();
            thread_of_a_job_apart() == first
        });
        assert!(reused, "every job apart started a new thread");
    }

    #[test]
    fn jobs_apart_run_together_and_at_most_workers_threads_stay_parked() {
        let jobs = WORKERS + 2;
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..jobs {
            let started = started_tx.clone();
            let release = Arc::clone(&release_rx);
            let done = done_tx.clone();
            let job: Job = Box::new(move || {
                let _ = started.send(());
                let _ = lock(&release).recv_timeout(Duration::from_secs(10));
                let _ = done.send(());
            });
            assert!(spawn_apart(job).is_ok(), "no thread for a job");
        }
        // Every job is running at once: none waits for another to end.
        for _ in 0..jobs {
            started_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a job apart did not start while the others ran");
        }
        for _ in 0..jobs {
            let _ = release_tx.send(());
        }
        for _ in 0..jobs {
            done_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a job apart did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            lock(&PARKED).len() <= WORKERS,
            "more threads parked than the limit"
        );
    }
}
