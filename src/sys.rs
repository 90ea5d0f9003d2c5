//! The crate's only calls into the C library that Rust's standard library
//! and `rustix` do not cover: blocking the termination signals in a thread
//! and waiting for one of them (`audit tail`, later `start`), so that a
//! SIGINT or SIGTERM becomes an orderly exit with status 0 instead of the
//! default action of killing the process; the pre-exec hook that puts a
//! command in its own session and working directory (EXEC.md §6), under
//! its Landlock ruleset when the command sandbox is on, and in its own
//! network namespace behind a socket filter when commands have no network
//! ([`isolation`]); the
//! inode-generation query that folder identities use (CONTROL.md §6); the
//! count of a socket's bytes its peer has not acknowledged (the keepalive);
//! taking a secret variable out of the process environment, including the
//! initial environment block the kernel shows in `/proc/<pid>/environ`; the
//! C allocator's thresholds for mapping and giving back memory; starting the
//! write-out of a file's range ahead of its `fsync`; the process allocator
//! that asks for huge pages behind large blocks and keeps the last large
//! blocks freed for the next; and the GPIO
//! chip-information ioctl of hardware discovery (CAPABILITIES.md §6); and
//! the pidfd of a Unix socket's peer (the approval socket).
//!
//! This is the one module allowed `unsafe` (CLI.md §4.2 hardening note:
//! SIGTERM is what service managers send). Every block carries a `SAFETY`
//! comment. It must never install an asynchronous signal handler: signals
//! are blocked and then accepted synchronously with `sigwait`, so no code
//! ever runs in signal context. Code running between `fork` and `exec` must
//! never allocate, lock or call anything that is not async-signal-safe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

mod isolation;

pub use isolation::{ConfinementFailure, NetworkIsolation, Part as ConfinementPart};

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
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
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

/// Arranges for the child of `command` to start a new session (so its pid
/// is the process-group id the shim signals), to enter the directory `cwd`
/// with `fchdir` (no path is walked again after the jail opened it), to
/// start with an empty signal mask and the default `SIGPIPE` action, and to
/// inherit no descriptor besides its standard streams (EXEC.md §6), and to
/// receive SIGKILL when the thread that spawned it ends (EXEC.md §11 L2).
///
/// The hook keeps its own duplicate of `cwd`, so the caller may close it
/// at any time. The parent-death signal fires when the spawning *thread*
/// exits, so the caller must outlive the direct child in that thread
/// (supervising it until it has exited does).
///
/// With `network`, the child enters its own user and network namespace
/// and installs the socket filter ([`NetworkIsolation::enter`]). With
/// `landlock`, a Landlock ruleset descriptor built before the fork, the
/// child also sets `no_new_privs` and enforces that ruleset on itself as
/// its last step before `exec`. If any of these fails the child never
/// execs, and the spawn error carries the step ([`ConfinementFailure`]).
pub fn prepare_command_child(
    command: &mut Command,
    cwd: BorrowedFd<'_>,
    landlock: Option<BorrowedFd<'_>>,
    network: Option<NetworkIsolation>,
) -> io::Result<()> {
    // The hook owns a duplicate (close-on-exec), so it stays valid for as
    // long as `command` can spawn; it closes when `command` is dropped.
    let cwd = cwd.try_clone_to_owned()?;
    let landlock = landlock.map(|fd| fd.try_clone_to_owned()).transpose()?;
    let shim = std::process::id();
    // Built here, before the fork, so the child only has to install it.
    let empty = empty_signal_set()?;
    let hook = move || -> io::Result<()> {
        // Everything below runs in the forked child before `exec`: only
        // async-signal-safe calls, no allocation (io::Error from an errno
        // number does not allocate; rustix makes the system calls directly).
        // `setsid` fails only if the child already leads a group, which a
        // freshly forked child never does.
        rustix::process::setsid()?;
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        // The shim may have died before the prctl took effect; then the
        // child was re-parented already and must not run. No parent at all
        // (outside our pid namespace) reads as 0, which is not the shim.
        let parent = rustix::process::Pid::as_raw(rustix::process::getppid());
        if u32::try_from(parent).ok() != Some(shim) {
            // SAFETY: `_exit` ends the forked child at once without running
            // the parent's atexit handlers or flushing its buffers.
            unsafe { libc::_exit(127) };
        }
        rustix::process::fchdir(&cwd)?;
        reset_signals(&empty)?;
        // Descriptors the shim opens itself are close-on-exec; marking all
        // above the standard streams also covers any that a library, or
        // whatever started the shim, left without the flag. The cwd
        // descriptor was used above, and std's own error-reporting pipe is
        // close-on-exec anyway. Kernels without close_range (before 5.11)
        // keep the flags as they were.
        cloexec_from(3);
        if let Some(network) = &network {
            network.enter()?;
        }
        if let Some(ruleset) = &landlock {
            restrict_self(ruleset.as_raw_fd())
                .map_err(|e| isolation::tag(ConfinementPart::Landlock, e))?;
        }
        Ok(())
    };
    // SAFETY: the hook only calls async-signal-safe functions (setsid,
    // prctl, getppid, _exit, fchdir, sigprocmask, signal, close_range,
    // unshare, open, write, close, socket, ioctl, landlock_restrict_self)
    // and allocates nothing.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

/// In a forked child before `exec`: sets `no_new_privs` (which Landlock
/// requires of an unprivileged process, and which keeps a set-uid program
/// from shedding the restriction) and enforces the Landlock ruleset `fd` on
/// the process. Two raw system calls, so async-signal-safe and free of
/// allocation, unlike the `landlock` crate's own `restrict_self`, whose
/// error paths build heap values.
fn restrict_self(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes only integer arguments
    // and changes only this process's flag.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a raw system call with integer arguments only: the ruleset
    // descriptor (open in this process, owned by the hook) and no flags.
    // It changes only this process's Landlock domain.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In a forked child before `exec`: the empty signal mask `empty` and the
/// default `SIGPIPE` action, which a program expects to start with (an
/// ignored disposition would survive `exec`). Async-signal-safe, allocates
/// nothing.
fn reset_signals(empty: &libc::sigset_t) -> io::Result<()> {
    // SAFETY: `empty` is an initialised `sigset_t`; a null old-set pointer
    // is allowed. (sigprocmask rather than pthread_sigmask: only the former
    // is on the async-signal-safe list; the forked child has one thread.)
    if unsafe { libc::sigprocmask(libc::SIG_SETMASK, empty, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `signal` is async-signal-safe; SIG_DFL for SIGPIPE is a valid
    // disposition.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Arranges for the child of `command` to start as an application the
/// user could have started (CAPABILITIES.md §4.9): a session of its own, an
/// empty signal mask, the default `SIGPIPE` action and no descriptor beyond
/// its standard streams. No parent-death signal: the application may
/// outlive the shim.
pub fn prepare_app_child(command: &mut Command) -> io::Result<()> {
    let empty = empty_signal_set()?;
    let hook = move || -> io::Result<()> {
        // Runs in the forked child before `exec`: async-signal-safe calls
        // only, no allocation.
        rustix::process::setsid()?;
        reset_signals(&empty)?;
        cloexec_from(3);
        Ok(())
    };
    // SAFETY: the hook only calls async-signal-safe functions (setsid,
    // sigprocmask, signal, close_range) and allocates nothing.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

/// Arranges for the child of `command` to become the spawner process
/// (EXEC.md §11 L5b): a session of its own (so terminal signals do not
/// reach it), `sock` on descriptor 3 (without close-on-exec), every other
/// descriptor above the standard streams close-on-exec, and an empty
/// signal mask. No parent-death signal: the spawner must outlive the shim
/// to clean up after it.
///
/// `sock` must not be descriptor 3 itself and must stay open until the
/// spawn call returns.
pub fn prepare_spawner_child(command: &mut Command, sock: BorrowedFd<'_>) -> io::Result<()> {
    let sock = sock.as_raw_fd();
    if sock == 3 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let empty = empty_signal_set()?;
    let hook = move || -> io::Result<()> {
        // Runs in the forked child before `exec`: async-signal-safe calls
        // only, no allocation.
        rustix::process::setsid()?;
        // SAFETY: `sock` is open in the child's copy of the descriptor
        // table (the parent keeps it open across the spawn) and differs
        // from 3, so `dup2` leaves the new descriptor without
        // close-on-exec.
        if unsafe { libc::dup2(sock, 3) } != 3 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `empty` is an initialised `sigset_t` captured by value.
        if unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        cloexec_from(4);
        Ok(())
    };
    // SAFETY: the hook only calls async-signal-safe functions (setsid,
    // dup2, sigprocmask, close_range) and allocates nothing.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

/// Takes ownership of descriptor `fd` inherited from the parent, if it is
/// open and a socket, and marks it close-on-exec so nothing this process
/// starts inherits it. Only for the spawner's socket, at process start,
/// before anything else in the process could have been given that number.
pub fn take_inherited_socket(fd: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only queries the descriptor's flags; an unopened
    // number yields EBADF and nothing else happens.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fstat` writes one `stat` to a valid location; the
    // descriptor was just found open.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: `fstat` succeeded, so the structure is initialised.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: the descriptor is open, it was inherited (this process has
    // not opened anything under this number at this point of start-up),
    // so no other owner exists and the OwnedFd becomes its only owner.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC).ok()?;
    Some(owned)
}

/// An empty signal set, built before a fork so the child only installs it.
fn empty_signal_set() -> io::Result<libc::sigset_t> {
    let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: `sigemptyset` initialises the set it is given; the pointer is
    // valid for writes of one `sigset_t`.
    let rc = unsafe { libc::sigemptyset(empty.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sigemptyset` succeeded, so the set is initialised.
    Ok(unsafe { empty.assume_init() })
}

/// Marks every descriptor from `first` up close-on-exec. Async-signal-safe
/// (one system call, no allocation), so pre-exec hooks may call it. Kernels
/// without close_range (before 5.11) keep the flags as they were.
fn cloexec_from(first: libc::c_uint) {
    // SAFETY: a raw system call with integer arguments only; it touches
    // nothing but this process's descriptor flags.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        );
    }
}

unsafe extern "C" {
    /// The C library's environment: a null-terminated array of pointers to
    /// `NAME=value` strings.
    static environ: *const *mut libc::c_char;
}

/// Takes the variable `name` out of the process: returns the value of its
/// first occurrence (the one `getenv` sees), overwrites the value bytes of
/// every occurrence with zeros in place, then removes the variable.
///
/// Overwriting comes first because removing only drops the pointer: the
/// characters would stay in the initial environment block at the top of
/// the stack, which `/proc/<pid>/environ` shows to anyone allowed to read
/// it. The value is copied into a zeroizing buffer only.
///
/// Must be called while the process has a single thread (nothing else may
/// read or change the environment meanwhile), before anything has called
/// `putenv` with a string in read-only memory (std only ever calls
/// `setenv`, which copies). The binary's entry calls it first thing.
pub fn take_env_var(name: &str) -> Option<zeroize::Zeroizing<Vec<u8>>> {
    use zeroize::Zeroize;
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    let key = name.as_bytes();
    let mut value: Option<zeroize::Zeroizing<Vec<u8>>> = None;
    // SAFETY: reading the pointer itself; the caller guarantees no other
    // thread changes the environment concurrently.
    let mut entry = unsafe { environ };
    while !entry.is_null() {
        // SAFETY: `entry` points into the null-terminated `environ` array:
        // it started at its first element and only advances past elements
        // that were not the terminating null.
        let string = unsafe { *entry };
        if string.is_null() {
            break;
        }
        // SAFETY: every element of `environ` is a NUL-terminated string.
        let len = unsafe { libc::strlen(string) };
        // SAFETY: `string` is valid for `len` bytes. They are writable:
        // each string is either in the kernel's initial block on the stack
        // or a heap copy made by `setenv` (the caller excludes `putenv` of
        // read-only memory), and no other thread uses them meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts_mut(string.cast::<u8>(), len) };
        if bytes.len() > key.len() && bytes.starts_with(key) && bytes[key.len()] == b'=' {
            let secret = &mut bytes[key.len() + 1..];
            if value.is_none() {
                value = Some(zeroize::Zeroizing::new(secret.to_vec()));
            }
            secret.zeroize();
        }
        // SAFETY: the current element was not the terminator, so the next
        // one is still inside the array.
        entry = unsafe { entry.add(1) };
    }
    // SAFETY: the caller guarantees the process has one thread, so no
    // other thread reads or writes the environment during the call; the
    // name is neither empty nor contains `=` or NUL.
    unsafe { std::env::remove_var(name) };
    value
}

/// A pidfd of the process that connected the Unix socket `sock`
/// (`SO_PEERPIDFD`, Linux 6.5 and later): unlike the pid of
/// `SO_PEERCRED`, it names that process and no other even after the pid
/// is reused. `Err` with `ENOPROTOOPT` on older kernels.
#[cfg(target_os = "linux")]
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // <asm-generic/socket.h>; the same number on x86_64 and arm64.
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `sock` is an open socket borrowed for the call; the kernel
    // writes at most `len` bytes (one `c_int`) into `fd` and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: the kernel just created `fd` for this process; nothing else
    // owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Other systems have no pidfds.
#[cfg(not(target_os = "linux"))]
pub fn peer_pidfd(_sock: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// The inode generation number of the open file `fd` (`FS_IOC_GETVERSION`),
/// or `None` where the filesystem does not keep one (tmpfs, most network
/// filesystems). Used to tell a folder recreated with a reused inode number
/// from the original (CONTROL.md §6 hardening note). `fd` must be a real
/// descriptor, not an `O_PATH` one.
#[cfg(target_os = "linux")]
pub fn inode_generation(fd: BorrowedFd<'_>) -> Option<u64> {
    // _IOR('v', 1, long): the kernel writes a `long`-sized value.
    const FS_IOC_GETVERSION: libc::c_ulong =
        0x8000_7601 | ((std::mem::size_of::<libc::c_long>() as libc::c_ulong) << 16);
    let mut generation: libc::c_long = 0;
    // SAFETY: `fd` is an open descriptor borrowed for the call; the request
    // writes exactly one `c_long` into `generation`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_GETVERSION as _, &mut generation) };
    if rc != 0 {
        return None;
    }
    // Filesystems store a 32-bit generation; ext4 writes only an `int`
    // into the buffer, which on the little-endian targets this shim runs
    // on (x86_64, arm64) lands in the low half of the zeroed long.
    Some(generation as u64 & 0xffff_ffff)
}

/// Other systems expose no generation number through this interface.
#[cfg(not(target_os = "linux"))]
pub fn inode_generation(_fd: BorrowedFd<'_>) -> Option<u64> {
    None
}

/// How many bytes written to the TCP socket `fd` its peer has not
/// acknowledged yet (`SIOCOUTQ`), or `None` where that cannot be asked.
/// Used to see that a peer still takes a large frame (PROTOCOL.md §1.5).
#[cfg(target_os = "linux")]
pub fn unacknowledged_bytes(fd: BorrowedFd<'_>) -> Option<u64> {
    let mut queued: libc::c_int = 0;
    // SAFETY: `fd` is an open descriptor borrowed for the call; SIOCOUTQ
    // (the same request number as TIOCOUTQ) writes exactly one `int` into
    // `queued`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ as _, &mut queued) };
    if rc != 0 {
        return None;
    }
    u64::try_from(queued).ok()
}

/// Other systems are not asked.
#[cfg(not(target_os = "linux"))]
pub fn unacknowledged_bytes(_fd: BorrowedFd<'_>) -> Option<u64> {
    None
}

/// Asks the kernel to start writing `len` bytes of the file `fd` from
/// `offset` to its disk now, without waiting (`sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`). A hint only: it makes nothing durable, a later
/// `fsync` still does that; it lets the disk work on the first pieces of a
/// large write while the rest is produced, so the `fsync` waits for less.
/// Failures are ignored for that reason.
#[cfg(target_os = "linux")]
pub fn start_writeback(fd: BorrowedFd<'_>, offset: u64, len: u64) {
    // glibc takes `off64_t`, musl `off_t`; both are 64-bit here.
    let (Ok(offset), Ok(len)) = (offset.try_into(), len.try_into()) else {
        return;
    };
    // SAFETY: `fd` is an open descriptor borrowed for the call; the call
    // takes no pointers and only schedules I/O on that file.
    let _ =
        unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
}

/// Elsewhere the final `fsync` does all of the writing.
#[cfg(not(target_os = "linux"))]
pub fn start_writeback(_fd: BorrowedFd<'_>, _offset: u64, _len: u64) {}

/// The process's allocator: the system's, with every block of 2 MiB or
/// more marked for huge pages where the kernel allows (`MADV_HUGEPAGE`, see
/// [`advise_huge_pages`]), and the last large blocks freed kept for the
/// next large allocations (see [`release_kept_blocks`]). A 10 MiB file
/// crosses the daemon as blocks of 13.3 MiB (the WebSocket message, its
/// parsed content, the response being built), each freshly mapped; faulted
/// in 4 KiB at a time, that is about 3,400 faults a block, and far fewer
/// when its 2 MiB-aligned parts get huge pages. A hint only, ignored where
/// huge pages are off or unsupported. Installed by the executable, not by
/// the library.
///
/// Where the kernel compacts memory on demand for advised ranges (`defrag`
/// set to `madvise`, a common default), a fault in a fragmented machine can
/// wait for that compaction; the trade is taken for blocks of 2 MiB and up
/// only, which are the large messages.
///
/// A fresh mapping also costs the kernel's clearing of every page of it,
/// and the copy of a 13.3 MiB message into one (the parsed content of a
/// large `FILE_WRITE`) paid for that clearing on every message. So up to
/// [`KEPT_BLOCKS`] freed blocks of [`KEPT_BLOCK_MIN`] to [`KEPT_BLOCK_MAX`]
/// bytes are kept, pages and all, and the next allocation they fit (at
/// most twice its size) takes one instead of a fresh mapping. What is kept
/// is bounded by those numbers, given back a while after the last block was
/// kept (see [`release_kept_blocks`]), and holds what was last written in
/// it until reused, as any freed memory does.
#[derive(Debug, Clone, Copy, Default)]
pub struct LargePages;

// SAFETY: every method forwards its arguments unchanged to `System`, whose
// guarantees therefore hold for the caller, and returns what `System`
// returned, or a block `System` returned earlier and that was freed since:
// a block is kept only when freed, taken only when it is at least as large
// as asked for and its address is checked to have the alignment asked for,
// and each kept block is handed out once (it leaves the store under its
// lock). Blocks handed out again are still the C allocator's, so `System`
// frees and resizes them: where blocks are kept (glibc and musl), `System`
// hands every layout kept to `malloc`, `free` and `realloc`, which know a
// block by its pointer, not by the size the layout gives.
// `advise_huge_pages` only hints how the kernel backs pages that are
// already mapped: it changes no byte of memory, it puts back the errno it
// may set, and it does not allocate; neither does keeping or taking a
// block.
unsafe impl GlobalAlloc for LargePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(block) = take_kept(layout) {
            return block;
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let block = unsafe { System.alloc(layout) };
        advise_huge_pages(block, layout.size());
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Not from the kept blocks: a fresh mapping is zero already, a kept
        // block would have to be cleared.
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        let block = unsafe { System.alloc_zeroed(layout) };
        advise_huge_pages(block, layout.size());
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: the caller frees a live block of this allocator, which
        // came from `System`.
        if unsafe { keep(block, layout) } {
            return;
        }
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract, and
        // every block came from `System` through this type.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, and
        // `block` came from `System` through this type.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        advise_huge_pages(moved, new_size);
        moved
    }
}

/// Freed large blocks [`LargePages`] keeps at most.
pub const KEPT_BLOCKS: usize = 2;

/// The smallest block kept: one huge page.
pub const KEPT_BLOCK_MIN: usize = 2 << 20;

/// The largest block kept: a 16 MiB message and the allocator's rounding.
pub const KEPT_BLOCK_MAX: usize = 17 << 20;

/// The largest alignment a block is kept or handed out for: what the C
/// allocator's `malloc` gives on 64-bit targets. Each kept block's own
/// address is still checked against the alignment asked for.
const KEPT_ALIGN: usize = 16;

/// The blocks [`LargePages`] keeps, and when the last was kept.
struct Kept {
    blocks: [Option<KeptBlock>; KEPT_BLOCKS],
    since: Option<std::time::Instant>,
}

/// A freed block of `System`'s and its usable size.
struct KeptBlock {
    at: *mut u8,
    usable: usize,
}

// SAFETY: a kept block is freed memory that no thread uses; whichever
// thread takes it out of the store owns it from then on.
unsafe impl Send for KeptBlock {}

static KEPT: std::sync::Mutex<Kept> = std::sync::Mutex::new(Kept {
    blocks: [const { None }; KEPT_BLOCKS],
    since: None,
});

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a block of `layout` may be kept, or served from a kept block.
fn keepable(layout: Layout) -> bool {
    (KEPT_BLOCK_MIN..=KEPT_BLOCK_MAX).contains(&layout.size()) && layout.align() <= KEPT_ALIGN
}

/// A kept block for `layout`, taken out of the store: the smallest that
/// holds it, and none that is more than twice its size.
fn take_kept(layout: Layout) -> Option<*mut u8> {
    if !keepable(layout) {
        return None;
    }
    let size = layout.size();
    let mut kept = kept();
    // Aligned as asked, checked rather than assumed: where the C library
    // aligns only to 8, a block freed from a layout of 8 must not serve
    // one of 16.
    let fits = |b: &KeptBlock| {
        b.usable >= size && b.usable / 2 <= size && (b.at as usize) % layout.align() == 0
    };
    let best = kept
        .blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.as_ref().filter(|b| fits(b)).map(|b| (i, b.usable)))
        .min_by_key(|&(_, usable)| usable)
        .map(|(i, _)| i)?;
    kept.blocks[best].take().map(|b| b.at)
}

/// Keeps the freed `block` of `layout` when it is of a kept size and there
/// is room; false: the caller frees it.
///
/// # Safety
/// `block` must be a live block of `System`'s, allocated with `layout`, that
/// the caller is freeing.
unsafe fn keep(block: *mut u8, layout: Layout) -> bool {
    if !keepable(layout) {
        return false;
    }
    // SAFETY: the caller passes a live block of the C allocator.
    let usable = unsafe { usable_size(block) };
    if usable < layout.size() || usable > KEPT_BLOCK_MAX {
        return false;
    }
    let mut kept = kept();
    let Some(free) = kept.blocks.iter_mut().find(|b| b.is_none()) else {
        return false;
    };
    *free = Some(KeptBlock { at: block, usable });
    kept.since = Some(std::time::Instant::now());
    true
}

/// Gives the blocks [`LargePages`] keeps back to the C allocator once
/// `idle` has passed since the last was kept: the memory of a burst of
/// large messages is not held after the burst. Cheap enough for every turn
/// of a reader: one lock and a clock read, and the freeing outside the
/// lock.
pub fn release_kept_blocks(idle: std::time::Duration) {
    let released: [Option<KeptBlock>; KEPT_BLOCKS] = {
        let mut kept = kept();
        match kept.since {
            Some(since) if since.elapsed() >= idle => {
                kept.since = None;
                std::mem::take(&mut kept.blocks)
            }
            _ => return,
        }
    };
    for block in released.into_iter().flatten() {
        // SAFETY: the block is one of the C allocator's, freed by its owner
        // and since owned by the store, which no longer holds it.
        unsafe { free_kept(block.at) };
    }
}

/// Gives a kept block back to the C allocator. Only `free` knows a block
/// by its pointer alone: the layout it was last asked for is gone, and a
/// block handed out again may be larger than that layout said.
///
/// # Safety
/// `block` must be a block of the C allocator that nothing else holds.
#[cfg(all(target_os = "linux", any(target_env = "gnu", target_env = "musl")))]
unsafe fn free_kept(block: *mut u8) {
    // SAFETY: the caller passes a block of the C allocator, freed once.
    unsafe { libc::free(block.cast()) }
}

/// Elsewhere no block is kept (see [`usable_size`]).
#[cfg(not(all(target_os = "linux", any(target_env = "gnu", target_env = "musl"))))]
unsafe fn free_kept(_block: *mut u8) {}

/// `MADV_HUGEPAGE` over the pages that hold the block of `len` bytes at
/// `block`, as the C allocator laid it out, when `len` is at least one huge
/// page (nothing for a null block).
///
/// A block this large normally has a mapping of its own (with glibc once
/// [`tune_allocator`] has run, and with musl), with the allocator's header
/// in its first page and its usable size reaching its last. The advice
/// covers all of that, not only the huge pages inside the block: advice
/// over part of a mapping splits it, after which the allocator can no
/// longer grow or shrink the block in place (`mremap` works within one
/// mapping) and copies it instead. A block carved from an arena's free
/// memory instead shares its first and last pages with neighbours, which
/// get the hint too and keep it after the block is freed; only whole
/// 2 MiB-aligned parts ever get huge pages.
#[cfg(target_os = "linux")]
fn advise_huge_pages(block: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    if block.is_null() || len < HUGE {
        return;
    }
    // SAFETY: `block` is a live block of the C allocator (just returned by
    // it), which `malloc_usable_size` reads the header of, without locking
    // or allocating.
    let usable = unsafe { usable_size(block) }.max(len);
    let Some(end) = (block as usize).checked_add(usable) else {
        return;
    };
    // SAFETY: `__errno_location` returns this thread's errno, valid for as
    // long as the thread runs; it is read and written only here, on this
    // thread. sysconf(_SC_PAGESIZE) reads a value the C library holds since
    // start-up, without allocating. [start, end) holds the block and the
    // rest of the pages it lies in, all mapped; madvise needs `start`
    // page-aligned, which it is, and rounds the length up itself.
    // MADV_HUGEPAGE changes how the kernel backs the range, never a byte of
    // it; a refusal (a kernel without transparent huge pages) leaves small
    // pages, which are correct, and the errno it sets is put back.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096);
        let start = block as usize / page * page;
        let _ = libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        *errno = saved;
    }
}

/// The usable size of a live block of the C allocator.
///
/// # Safety
/// `block` must be a live block of the C allocator.
#[cfg(all(target_os = "linux", any(target_env = "gnu", target_env = "musl")))]
unsafe fn usable_size(block: *mut u8) -> usize {
    // SAFETY: the caller passes a live block of the C allocator.
    unsafe { libc::malloc_usable_size(block.cast()) }
}

/// Other C libraries and systems: only the size asked for is known, so no
/// block is kept.
#[cfg(not(all(target_os = "linux", any(target_env = "gnu", target_env = "musl"))))]
unsafe fn usable_size(_block: *mut u8) -> usize {
    0
}

/// Elsewhere large blocks fault in page by page.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_block: *mut u8, _len: usize) {}

/// Allocations of at least this many bytes get a mapping of their own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const LARGE_ALLOCATION: libc::c_int = 1 << 20;

/// Freed memory an arena of the C allocator keeps at its top for reuse.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const KEPT_FREE: libc::c_int = 2 << 20;

/// Tunes the C allocator for a daemon that builds and frees frames of up to
/// 16 MiB on many threads. Call it before the workers start.
///
/// * Every allocation of [`LARGE_ALLOCATION`] bytes or more gets a mapping
///   of its own, returned to the system when it is freed. glibc otherwise
///   raises that threshold after the first large free and serves later
///   large blocks from per-thread arenas that keep their pages: every
///   worker keeping the pages of the largest response it once built would
///   hold a hundred megabytes and more that nothing uses.
/// * An arena keeps up to [`KEPT_FREE`] of freed memory at its top instead
///   of 128 KiB. Below the mapping threshold, the socket writer's TLS
///   records (up to 1 MiB queued, allocated and freed record by record) are
///   all freed between two large messages; trimmed at 128 KiB, the arena
///   gave those pages back and faulted them in again for the next message,
///   about 4,500 page faults per 10 MiB read. What this keeps is bounded by
///   the threshold times the arenas, which are at most one per thread, and
///   in practice by what each thread frees at once. Memory kept this way
///   still holds what was last written in it (file bytes, TLS records) until
///   reused, as any freed memory does before it is returned; the process is
///   not dumpable and its memory not readable by other users.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    // SAFETY: mallopt only changes a tuning parameter of the allocator,
    // under the allocator's own lock; it takes no pointers. A refusal
    // (return value 0) leaves the default behaviour, which is still correct.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_ALLOCATION);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE);
    }
}

/// Other C libraries (musl among them) already map large allocations on
/// their own and unmap them when freed, and have no trim threshold to set.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

/// `struct gpiochip_info` of `<linux/gpio.h>`: what `GPIO_GET_CHIPINFO_IOCTL`
/// writes.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Clone, Copy)]
struct GpioChipInfo {
    /// The kernel's name of the chip (`gpiochip0`), NUL-terminated.
    name: [u8; 32],
    /// The functional name the driver gives it, NUL-terminated.
    label: [u8; 32],
    /// Number of GPIO lines.
    lines: u32,
}

/// `GPIO_GET_CHIPINFO_IOCTL`, `_IOR(0xB4, 0x01, struct gpiochip_info)`.
#[cfg(target_os = "linux")]
const GPIO_GET_CHIPINFO_IOCTL: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::read::<GpioChipInfo>(0xB4, 0x01);

// The layout the kernel writes: two 32-byte strings and a 32-bit count.
#[cfg(target_os = "linux")]
const _: () = assert!(std::mem::size_of::<GpioChipInfo>() == 68);

/// The label and line count of the GPIO chip open as `fd`
/// (`GPIO_GET_CHIPINFO_IOCTL`). The label is cut at its first NUL, with
/// invalid UTF-8 replaced. Any descriptor that is not a GPIO character
/// device fails (a regular file with `ENOTTY`), so callers need not know
/// in advance what they opened.
#[cfg(target_os = "linux")]
pub fn gpio_chip_info(fd: BorrowedFd<'_>) -> io::Result<(String, u32)> {
    use rustix::ioctl::{Getter, ioctl};
    // SAFETY: the opcode is `GPIO_GET_CHIPINFO_IOCTL` as `<linux/gpio.h>`
    // composes it, and `GpioChipInfo` is the `repr(C)` image of the
    // `struct gpiochip_info` it names, whose size is encoded in the opcode:
    // the kernel writes at most that many bytes into the getter's buffer,
    // and every bit pattern is a valid `GpioChipInfo`. `fd` is borrowed
    // open for the call.
    let info = unsafe { ioctl(fd, Getter::<GPIO_GET_CHIPINFO_IOCTL, GpioChipInfo>::new()) }?;
    let end = info
        .label
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(info.label.len());
    let label = String::from_utf8_lossy(&info.label[..end]).into_owned();
    Ok((label, info.lines))
}

/// Other systems have no GPIO character devices.
#[cfg(not(target_os = "linux"))]
pub fn gpio_chip_info(_fd: BorrowedFd<'_>) -> io::Result<(String, u32)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "GPIO character devices exist only on Linux",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    // Test fixtures fail loudly by design.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn large_blocks_keep_their_content_through_the_allocator() {
        let _alone = allocator_as_the_daemon_runs();
        let layout = Layout::from_size_align(5 << 20, 16).unwrap();
        // SAFETY: the layout is non-zero; every block is checked non-null,
        // used within its size and freed once with the layout it has.
        unsafe {
            let block = LargePages.alloc(layout);
            assert!(!block.is_null());
            for i in 0..layout.size() {
                *block.add(i) = (i % 251) as u8;
            }
            let grown = LargePages.realloc(block, layout, 9 << 20);
            assert!(!grown.is_null());
            assert!((0..layout.size()).all(|i| *grown.add(i) == (i % 251) as u8));
            LargePages.dealloc(grown, Layout::from_size_align(9 << 20, 16).unwrap());
            release_kept_blocks(std::time::Duration::ZERO);
            let zeroed = LargePages.alloc_zeroed(layout);
            assert!(!zeroed.is_null());
            assert!((0..layout.size()).all(|i| *zeroed.add(i) == 0));
            LargePages.dealloc(zeroed, layout);
        }
    }

    /// Holds off the other tests that use [`LargePages`], whose kept blocks
    /// are shared by the whole process, then sets the allocator up as the
    /// daemon does, with no block kept.
    fn allocator_as_the_daemon_runs() -> std::sync::MutexGuard<'static, ()> {
        static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let alone = ALONE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tune_allocator();
        release_kept_blocks(std::time::Duration::ZERO);
        alone
    }

    /// Whether every byte of the `len` bytes at `block` is `pattern(i)`.
    ///
    /// # Safety
    /// `block` must hold `len` readable bytes.
    unsafe fn holds(block: *mut u8, len: usize, pattern: impl Fn(usize) -> u8) -> bool {
        // SAFETY: the caller vouches for the range.
        (0..len).all(|i| unsafe { *block.add(i) } == pattern(i))
    }

    // Blocks are kept only where the C library tells their usable size.
    #[cfg(any(target_env = "gnu", target_env = "musl"))]
    #[test]
    fn a_freed_large_block_is_kept_for_the_next_and_given_back_when_idle() {
        let _alone = allocator_as_the_daemon_runs();
        let layout = Layout::from_size_align(8 << 20, 16).unwrap();
        let pattern = |i: usize| (i % 253) as u8;
        // SAFETY: the layouts are non-zero; every block is checked non-null,
        // used within its size and freed once with the layout it was asked
        // for (a kept block is at least that large).
        unsafe {
            let first = LargePages.alloc(layout);
            assert!(!first.is_null());
            for i in 0..layout.size() {
                *first.add(i) = pattern(i);
            }
            LargePages.dealloc(first, layout);
            // Still within the idle time: kept, pages and content.
            release_kept_blocks(std::time::Duration::from_secs(60));
            let again = LargePages.alloc(layout);
            assert_eq!(again, first);
            assert!(holds(again, layout.size(), pattern));
            LargePages.dealloc(again, layout);

            // Neither a block of less than half its size nor a zeroed one
            // takes it; while it is kept, no fresh block can be at its
            // address.
            let small = Layout::from_size_align(3 << 20, 16).unwrap();
            let other = LargePages.alloc(small);
            assert!(!other.is_null() && other != first);
            let zeroed = LargePages.alloc_zeroed(layout);
            assert!(!zeroed.is_null() && zeroed != first);
            assert!(holds(zeroed, layout.size(), |_| 0));
            LargePages.dealloc(zeroed, layout);
            LargePages.dealloc(other, small);

            // Given back: the next block is a fresh, zero-filled mapping.
            release_kept_blocks(std::time::Duration::ZERO);
            let fresh = LargePages.alloc(layout);
            assert!(!fresh.is_null());
            assert!(holds(fresh, layout.size(), |_| 0));
            LargePages.dealloc(fresh, layout);

            // Over the largest kept size: given back at once.
            let huge = Layout::from_size_align(KEPT_BLOCK_MAX + 1, 16).unwrap();
            let block = LargePages.alloc(huge);
            assert!(!block.is_null());
            block.write_bytes(7, huge.size());
            LargePages.dealloc(block, huge);
            assert!(kept().blocks.iter().flatten().all(|b| b.at != block));
            let next = LargePages.alloc(huge);
            assert!(!next.is_null());
            assert!(holds(next, huge.size(), |_| 0));
            LargePages.dealloc(next, huge);

            // No more than two are kept: a third is given back at once.
            let blocks = [0; 3].map(|_| LargePages.alloc(layout));
            assert!(blocks.iter().all(|b| !b.is_null()));
            for block in blocks {
                LargePages.dealloc(block, layout);
            }
            assert_eq!(kept().blocks.iter().flatten().count(), KEPT_BLOCKS);
            release_kept_blocks(std::time::Duration::ZERO);
            assert!(kept().blocks.iter().all(Option::is_none));
        }
    }

    /// The extent and `VmFlags` of the mapping that holds `address`, from
    /// `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn mapping_of(address: usize) -> (std::ops::Range<usize>, String) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut holding = None;
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some(range) = holding {
                    return (range, flags.trim().to_owned());
                }
                continue;
            }
            let range = line.split(' ').next().unwrap_or("");
            if let Some((from, to)) = range.split_once('-') {
                let from = usize::from_str_radix(from, 16);
                let to = usize::from_str_radix(to, 16);
                if let (Ok(from), Ok(to)) = (from, to) {
                    holding = Some(from..to).filter(|r| r.contains(&address));
                }
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    /// A private anonymous mapping of the test's own, unmapped when dropped.
    #[cfg(target_os = "linux")]
    struct Scratch {
        at: *mut libc::c_void,
        len: usize,
    }

    #[cfg(target_os = "linux")]
    impl Scratch {
        fn new(len: usize) -> Self {
            // SAFETY: with a null hint and no MAP_FIXED, mmap makes a fresh
            // mapping that overlaps nothing already mapped.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            Scratch { at, len }
        }
    }

    #[cfg(target_os = "linux")]
    impl Drop for Scratch {
        fn drop(&mut self) {
            // SAFETY: the mapping is this value's own, unmapped only here.
            unsafe { libc::munmap(self.at, self.len) };
        }
    }

    /// Whether this kernel takes `MADV_HUGEPAGE` (it refuses it when built
    /// without transparent huge pages), tried on a mapping of the test's own.
    #[cfg(target_os = "linux")]
    fn kernel_takes_huge_page_advice() -> bool {
        let scratch = Scratch::new(4 << 20);
        // SAFETY: the range is the scratch mapping, which nothing else uses.
        unsafe { libc::madvise(scratch.at, scratch.len, libc::MADV_HUGEPAGE) == 0 }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_is_marked_for_huge_pages_as_one_mapping() {
        // As the daemon runs: blocks of 1 MiB and more get mappings of
        // their own.
        let _alone = allocator_as_the_daemon_runs();
        let page = 4096;
        // A power of two, and a size whose mapping has one page more than
        // the block's own end reaches (the allocator's header and rounding).
        for len in [8 << 20, 1025 * page - 16] {
            let layout = Layout::from_size_align(len, 16).unwrap();
            // SAFETY: the layout is non-zero; the block is checked non-null,
            // measured while live and freed once with its layout.
            unsafe {
                let block = LargePages.alloc(layout);
                assert!(!block.is_null());
                let start = block as usize / page * page;
                let end = (block as usize + usable_size(block)).next_multiple_of(page);
                let (extent, flags) = mapping_of(block as usize);
                let hinted = flags.split(' ').any(|f| f == "hg");
                assert_eq!(hinted, kernel_takes_huge_page_advice(), "{flags}");
                // Not split: the allocator can still grow it in place.
                assert!(
                    extent.start <= start && extent.end >= end,
                    "{len} bytes at {block:?} in {extent:x?}"
                );
                LargePages.dealloc(block, layout);
                // The next size is measured on a mapping of its own, not
                // on this block kept.
                release_kept_blocks(std::time::Duration::ZERO);
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_block_under_a_huge_page_is_not_advised() {
        // A block under 2 MiB is left before anything reads the allocator's
        // header, so a mapping of the test's own can stand for it.
        let scratch = Scratch::new(1 << 20);
        advise_huge_pages(scratch.at.cast(), scratch.len);
        let (_, flags) = mapping_of(scratch.at as usize);
        assert!(!flags.split(' ').any(|f| f == "hg"), "{flags}");
    }

    #[test]
    fn gpio_chipinfo_opcode_is_the_kernel_header_value() {
        // _IOC_READ (2) << 30 | sizeof (68) << 16 | 0xB4 << 8 | 0x01 on
        // every architecture this shim builds for.
        assert_eq!(u64::from(GPIO_GET_CHIPINFO_IOCTL), 0x8044_B401);
    }

    #[test]
    fn gpio_chip_info_fails_on_what_is_not_a_gpio_chip() {
        let file = tempfile::tempfile().unwrap();
        let error = gpio_chip_info(file.as_fd()).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOTTY));
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(gpio_chip_info(null.as_fd()).is_err());
    }
}
