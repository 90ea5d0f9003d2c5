//! What both emulator servers share: the accept side (one thread accepting
//! on a loopback listener and one thread per connection, stopped by a flag
//! and a wake-up connection) and the [`Record`] of what they saw, which
//! tests wait on.
//!
//! It never reads or writes a byte of a connection; the handler does.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A running accept thread.
#[derive(Debug)]
pub(crate) struct Acceptor {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Accepts on `listener` until stopped, handing each connection to
    /// `handle` on a thread of its own named `conn_name` (a stalled client
    /// must not hold up the next one).
    pub(crate) fn start<F>(
        listener: TcpListener,
        name: &str,
        conn_name: &'static str,
        stop: Arc<AtomicBool>,
        handle: F,
    ) -> io::Result<Acceptor>
    where
        F: Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
    {
        let addr = listener.local_addr()?;
        let handle = Arc::new(handle);
        let loop_stop = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                loop {
                    let accepted = listener.accept();
                    if loop_stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok((tcp, peer)) = accepted else {
                        // A failed accept concerns only that client; a short
                        // pause keeps a persistent error (out of file
                        // descriptors) from spinning.
                        thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let handle = Arc::clone(&handle);
                    let spawned = thread::Builder::new()
                        .name(conn_name.to_owned())
                        .spawn(move || handle(tcp, peer));
                    if spawned.is_err() {
                        thread::sleep(Duration::from_millis(10));
                    }
                }
            })?;
        Ok(Acceptor {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Acceptor {
    /// Stops accepting and waits for the accept thread to end; connections
    /// already handed to their handler carry on. Doing it again does nothing.
    pub(crate) fn stop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        // The accept loop blocks in accept(); one connection wakes it to see
        // the flag. If the connect fails the listener is already gone.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A list of things the server saw, that a test can wait on.
#[derive(Debug)]
pub(crate) struct Record<T> {
    items: std::sync::Mutex<Vec<T>>,
    added: std::sync::Condvar,
}

impl<T: Clone> Record<T> {
    pub(crate) fn new() -> Record<T> {
        Record {
            items: std::sync::Mutex::new(Vec::new()),
            added: std::sync::Condvar::new(),
        }
    }

    /// Appends one and wakes the waiters.
    pub(crate) fn push(&self, item: T) {
        self.lock().push(item);
        self.added.notify_all();
    }

    /// Everything so far, in order.
    pub(crate) fn all(&self) -> Vec<T> {
        self.lock().clone()
    }

    /// Waits until at least `count` are there (or `timeout` passed) and
    /// returns all of them.
    pub(crate) fn wait_for(&self, count: usize, timeout: Duration) -> Vec<T> {
        let deadline = std::time::Instant::now() + timeout;
        let mut items = self.lock();
        loop {
            let now = std::time::Instant::now();
            if items.len() >= count || now >= deadline {
                return items.clone();
            }
            items = self
                .added
                .wait_timeout(items, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        // Items are pushed in one step; a panic elsewhere leaves the list
        // whole.
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
