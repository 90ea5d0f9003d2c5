//! The crate's only calls into the C library that Rust's standard library
//! and `rustix` do not cover: blocking the termination signals in a thread
//! and waiting for one of them (`audit tail`, later `start`), so that a
//! SIGINT or SIGTERM becomes an orderly exit with status 0 instead of the
//! default action of killing the process.
//!
//! This is the one module allowed `unsafe` (CLI.md §4.2 hardening note:
//! SIGTERM is what service managers send). Every block carries a `SAFETY`
//! comment. It must never install an asynchronous signal handler: signals
//! are blocked and then accepted synchronously with `sigwait`, so no code
//! ever runs in signal context.
#![allow(unsafe_code)]

use std::fmt;
use std::io;

/// A set of blocked signals, to be waited for with
/// [`wait_for_termination_signal`].
#[derive(Clone, Copy)]
pub struct SignalSet(libc::sigset_t);

impl fmt::Debug for SignalSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SignalSet(SIGINT, SIGTERM)")
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread and returns the set.
///
/// Threads inherit the mask of the thread that creates them, so calling this
/// before any other thread starts leaves the signals pending for the process
/// until a thread accepts them with [`wait_for_termination_signal`]. A
/// thread that already exists keeps its own mask and could still receive
/// the default action.
pub fn block_termination_signals() -> io::Result<SignalSet> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `sigemptyset` initialises the set it is given; the pointer is
    // valid for writes of one `sigset_t`.
    let rc = unsafe { libc::sigemptyset(set.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sigemptyset` succeeded, so the set is initialised.
    let mut set = unsafe { set.assume_init() };
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `set` is an initialised `sigset_t` and the signal numbers
        // are valid constants.
        let rc = unsafe { libc::sigaddset(&mut set, signal) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        // pthread functions return the error number instead of setting errno.
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(SignalSet(set))
}

/// Waits until one of the signals of `set` is pending and accepts it;
/// returns its number. The signals must be blocked in every thread (see
/// [`block_termination_signals`]), otherwise one may be delivered elsewhere.
pub fn wait_for_termination_signal(set: &SignalSet) -> io::Result<i32> {
    let mut signal: libc::c_int = 0;
    loop {
        // SAFETY: `set.0` is an initialised `sigset_t` and `signal` is a
        // valid location for the result.
        let rc = unsafe { libc::sigwait(&set.0, &mut signal) };
        match rc {
            0 => return Ok(signal),
            libc::EINTR => continue,
            error => return Err(io::Error::from_raw_os_error(error)),
        }
    }
}
