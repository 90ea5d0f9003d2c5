//! Cancellation of running commands (EXEC.md §12, PROTOCOL.md §11.4): a
//! token the session owner trips when its connection closes or the shim
//! shuts down. Every command supervised under the token then goes through
//! the termination sequence and reports no result.
//!
//! The token is an eventfd that is written once and never read, so it
//! stays readable: every supervisor's `poll` wakes on it without a
//! dedicated thread. It never cancels anything itself.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::event::EventfdFlags;

/// A cancellation token shared by the commands of one session.
#[derive(Debug)]
pub struct Cancel {
    tripped: AtomicBool,
    fd: OwnedFd,
}

impl Cancel {
    /// A token that is not tripped.
    pub fn new() -> io::Result<Cancel> {
        Ok(Cancel {
            tripped: AtomicBool::new(false),
            fd: rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        })
    }

    /// Trips the token; idempotent.
    pub fn cancel(&self) {
        if !self.tripped.swap(true, Ordering::SeqCst) {
            // Cannot fail short of a counter overflow, which one write of 1
            // never reaches.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// True once [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.tripped.load(Ordering::SeqCst)
    }

    /// Readable once tripped, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
