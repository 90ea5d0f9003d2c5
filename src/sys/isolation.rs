//! The network isolation of a command (`command_network = "none"`), set up
//! in the forked child before `exec`: a new user namespace (so that an
//! unprivileged shim may create the rest) and a new network namespace
//! whose only interface is its own loopback, brought up; then a seccomp
//! filter that lets the command create Internet and netlink sockets only.
//! A network namespace does not separate Unix sockets bound to paths, so
//! without the filter a command could still reach the host's D-Bus, a
//! container daemon's socket or, through vsock, the hypervisor; io_uring
//! can create sockets without the `socket` system call, so it is refused
//! too.
//!
//! Also how a failed confinement step in the child reaches the shim: the
//! pre-exec hook can only report one `errno`, so the step is carried in
//! bits no real `errno` uses ([`tag`], [`ConfinementFailure::decode`]).
//!
//! Everything the child runs is built before the fork and installed with
//! raw system calls: it never allocates, locks or formats. It never maps
//! any identity but the shim's own into the new namespace.

use std::io;

/// The part of a command's confinement that failed in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Enforcing the Landlock ruleset (or the `no_new_privs` it needs).
    Landlock,
    /// Creating the user and network namespaces.
    Namespaces,
    /// Mapping the shim's user and group into the user namespace.
    IdentityMap,
    /// Bringing up the namespace's loopback interface.
    Loopback,
    /// Installing the seccomp filter.
    Seccomp,
    /// Trying the isolation at all (the probe could not run).
    Probe,
}

impl Part {
    const ALL: [Part; 6] = [
        Part::Landlock,
        Part::Namespaces,
        Part::IdentityMap,
        Part::Loopback,
        Part::Seccomp,
        Part::Probe,
    ];

    /// Whether the failure belongs to the network isolation (rather than
    /// the filesystem sandbox).
    pub fn is_network(self) -> bool {
        self != Part::Landlock
    }

    /// What could not be done, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Part::Landlock => "the Landlock ruleset could not be enforced",
            Part::Namespaces => "a user and network namespace could not be created",
            Part::IdentityMap => "the user could not be mapped into the new user namespace",
            Part::Loopback => "the namespace's loopback interface could not be brought up",
            Part::Seccomp => "the seccomp socket filter could not be installed",
            Part::Probe => "the isolation could not be tried",
        }
    }

    fn code(self) -> i32 {
        match self {
            Part::Landlock => 1,
            Part::Namespaces => 2,
            Part::IdentityMap => 3,
            Part::Loopback => 4,
            Part::Seccomp => 5,
            Part::Probe => 6,
        }
    }
}

/// Marks a tagged value; `errno` values stay below 4096.
const TAG: i32 = 0x5300_0000;

/// The error a failed step reports from the child: `errno` with the step.
pub fn tag(part: Part, error: io::Error) -> io::Error {
    let errno = error.raw_os_error().unwrap_or(libc::EIO) & 0xfff;
    io::Error::from_raw_os_error(TAG | (part.code() << 12) | errno)
}

/// A confinement step that failed in a command's child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfinementFailure {
    /// Which step.
    pub part: Part,
    /// The system's error.
    pub errno: i32,
}

impl ConfinementFailure {
    /// The failure a spawn error carries, if it is one.
    pub fn decode(raw: i32) -> Option<ConfinementFailure> {
        if raw & !0x00ff_ffff != TAG {
            return None;
        }
        let code = (raw >> 12) & 0xfff;
        let part = Part::ALL.into_iter().find(|p| p.code() == code)?;
        Some(ConfinementFailure {
            part,
            errno: raw & 0xfff,
        })
    }

    /// One line: the step and the system's reason.
    pub fn message(&self) -> String {
        format!(
            "{} ({})",
            self.part.describe(),
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

/// Everything the child needs, prepared before the fork.
#[derive(Debug, Clone, Copy)]
pub struct NetworkIsolation {
    uid_map: MapLine,
    gid_map: MapLine,
}

/// "`id` `id` 1\n", the only mapping an unprivileged process may write.
#[derive(Debug, Clone, Copy)]
struct MapLine {
    bytes: [u8; 32],
    len: usize,
}

impl MapLine {
    fn new(id: u32) -> MapLine {
        use std::io::Write;
        let mut bytes = [0u8; 32];
        let mut cursor = io::Cursor::new(&mut bytes[..]);
        // Two ten-digit numbers, two spaces, "1\n": 25 bytes at most.
        let _ = writeln!(cursor, "{id} {id} 1");
        let len = usize::try_from(cursor.position()).unwrap_or(0);
        MapLine { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl NetworkIsolation {
    /// The isolation for a command of this process's user and group.
    pub fn new() -> NetworkIsolation {
        NetworkIsolation {
            uid_map: MapLine::new(rustix::process::geteuid().as_raw()),
            gid_map: MapLine::new(rustix::process::getegid().as_raw()),
        }
    }

    /// In a forked, single-threaded child before `exec`: enters the new
    /// namespaces, maps the identity, brings up the loopback and installs
    /// the socket filter. Errors are [`tag`]ged with the step. Only raw
    /// system calls; allocates nothing.
    pub fn enter(&self) -> io::Result<()> {
        let os = io::Error::last_os_error;
        // SAFETY: `unshare` takes flags only; it changes only this
        // (single-threaded) process's namespaces.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
            return Err(tag(Part::Namespaces, os()));
        }
        // The shim's processes are not dumpable, which makes their /proc
        // files root's: the maps below could not be written by a user.
        // Dumpable now changes nothing an attacker could use (same-user
        // processes own the new namespace, and so may trace this child
        // anyway), and `exec` resets the flag for the command.
        // SAFETY: prctl with PR_SET_DUMPABLE takes integer arguments only
        // and changes only this process's flag.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
            return Err(tag(Part::IdentityMap, os()));
        }
        write_proc(c"/proc/self/uid_map", self.uid_map.as_bytes())
            .and_then(|()| write_proc(c"/proc/self/setgroups", b"deny"))
            .and_then(|()| write_proc(c"/proc/self/gid_map", self.gid_map.as_bytes()))
            .map_err(|e| tag(Part::IdentityMap, e))?;
        loopback_up().map_err(|e| tag(Part::Loopback, e))?;
        install_socket_filter().map_err(|e| tag(Part::Seccomp, e))
    }
}

impl Default for NetworkIsolation {
    fn default() -> Self {
        NetworkIsolation::new()
    }
}

/// Writes `data` to a `/proc` file in one `write`, as those files require.
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `data` is valid for reads of its length; `fd` was opened
    // above and is closed below.
    let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let result = if written < 0 {
        Err(io::Error::last_os_error())
    } else if usize::try_from(written).ok() != Some(data.len()) {
        Err(io::Error::from_raw_os_error(libc::EIO))
    } else {
        Ok(())
    };
    // SAFETY: `fd` is open and owned here.
    unsafe { libc::close(fd) };
    result
}

/// Sets `lo` up in the current network namespace.
fn loopback_up() -> io::Result<()> {
    // SAFETY: `socket` takes integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ifreq` is plain data (a name and a union of integers and
    // addresses), for which all zero bytes are a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // Loopback and running are the kernel's own flags for `lo`; up is
    // the one being set.
    request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16;
    // SAFETY: SIOCSIFFLAGS reads one `ifreq`, which `request` is, valid
    // for the duration of the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &request) };
    let result = if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: `fd` is open and owned here.
    unsafe { libc::close(fd) };
    result
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// System calls numbered from here are the x32 ABI on x86_64, which the
/// filter does not inspect and therefore refuses.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `struct seccomp_data`: `nr` at 0, `arch` at 4, `args[i]` at 16 + 8i
/// (their low halves on these little-endian machines).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;
const ARG1: u32 = 24;
const ARG2: u32 = 32;

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
const AND: u32 = libc::BPF_ALU | libc::BPF_AND | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

/// The socket type's bits of `socket`'s and `socketpair`'s second
/// argument (the rest are flags).
const SOCK_TYPE_MASK: u32 = 0xf;

/// The routing netlink protocol (`<linux/netlink.h>`), the one the C
/// library needs for the namespace's own addresses.
const NETLINK_ROUTE: u32 = 0;

/// Lets a command create Internet sockets, routing netlink sockets (the
/// namespace's own addresses and routes) and connected Unix socket pairs;
/// refuses, with `EACCES`, every other socket (a Unix socket could reach
/// the host's services by path, a datagram pair can still send to a
/// path), io_uring (it creates sockets without these calls) and the x32
/// calls; kills a process that makes a system call of another
/// architecture, whose numbers this filter does not know. A jump's
/// offsets count the instructions after it: the refusal is instruction 20,
/// the allowances 8 and 21.
#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_endian = "little"
))]
const SOCKET_FILTER: [libc::sock_filter; 22] = {
    let deny = libc::SECCOMP_RET_ERRNO | (libc::EACCES as u32);
    [
        /* 0 */ statement(LOAD, ARCH),
        /* 1 */ jump(JEQ, AUDIT_ARCH, 1, 0),
        /* 2 */ statement(RET, libc::SECCOMP_RET_KILL_PROCESS),
        /* 3 */ statement(LOAD, NR),
        /* 4 */ jump(JGE, X32_SYSCALL_BIT, 15, 0),
        /* 5 */ jump(JEQ, libc::SYS_io_uring_setup as u32, 14, 0),
        /* 6 */ jump(JEQ, libc::SYS_socket as u32, 2, 0),
        /* 7 */ jump(JEQ, libc::SYS_socketpair as u32, 7, 0),
        /* 8 */ statement(RET, libc::SECCOMP_RET_ALLOW),
        // socket(family, type, protocol)
        /* 9 */ statement(LOAD, ARG0),
        /* 10 */ jump(JEQ, libc::AF_INET as u32, 10, 0),
        /* 11 */ jump(JEQ, libc::AF_INET6 as u32, 9, 0),
        /* 12 */ jump(JEQ, libc::AF_NETLINK as u32, 0, 7),
        /* 13 */ statement(LOAD, ARG2),
        /* 14 */ jump(JEQ, NETLINK_ROUTE, 6, 5),
        // socketpair(family, type, protocol, sv)
        /* 15 */ statement(LOAD, ARG0),
        /* 16 */ jump(JEQ, libc::AF_UNIX as u32, 0, 4),
        /* 17 */ statement(LOAD, ARG1),
        /* 18 */ statement(AND, SOCK_TYPE_MASK),
        /* 19 */ jump(JEQ, libc::SOCK_DGRAM as u32, 0, 1),
        /* 20 */ statement(RET, deny),
        /* 21 */ statement(RET, libc::SECCOMP_RET_ALLOW),
    ]
};

/// Installs [`SOCKET_FILTER`] on the calling process (after setting
/// `no_new_privs`, which an unprivileged filter requires).
#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_endian = "little"
))]
fn install_socket_filter() -> io::Result<()> {
    let program = libc::sock_fprog {
        len: SOCKET_FILTER.len() as u16,
        filter: SOCKET_FILTER.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes only integer arguments
    // and changes only this process's flag.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `program` points at a static filter of `len` instructions,
    // which the kernel copies during the call.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Other architectures: the filter's system-call numbers are not known
/// here, so isolation is refused rather than installed without it.
#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_endian = "little"
)))]
fn install_socket_filter() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_error_decodes_to_its_step_and_errno() {
        for part in Part::ALL {
            let raw = tag(part, io::Error::from_raw_os_error(libc::EPERM))
                .raw_os_error()
                .unwrap_or(0);
            assert_eq!(
                ConfinementFailure::decode(raw),
                Some(ConfinementFailure {
                    part,
                    errno: libc::EPERM
                })
            );
        }
    }

    #[test]
    fn a_plain_errno_is_not_a_confinement_failure() {
        for errno in [0, libc::ENOENT, libc::EACCES, libc::E2BIG, 4095] {
            assert_eq!(ConfinementFailure::decode(errno), None);
        }
    }

    /// Runs `SOCKET_FILTER` the way the kernel does, for one call.
    #[cfg(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_endian = "little"
    ))]
    fn verdict(arch: u32, nr: u32, args: [u32; 3]) -> u32 {
        let word = |offset: u32| match offset {
            NR => nr,
            ARCH => arch,
            ARG0 => args[0],
            ARG1 => args[1],
            ARG2 => args[2],
            other => panic!("the filter reads offset {other}"),
        };
        let mut accumulator = 0u32;
        let mut pc = 0usize;
        loop {
            let op = SOCKET_FILTER[pc];
            let code = u32::from(op.code);
            pc += 1;
            match code {
                LOAD => accumulator = word(op.k),
                AND => accumulator &= op.k,
                RET => return op.k,
                JEQ | JGE => {
                    let taken = if code == JEQ {
                        accumulator == op.k
                    } else {
                        accumulator >= op.k
                    };
                    pc += usize::from(if taken { op.jt } else { op.jf });
                }
                other => panic!("unexpected instruction {other:#x}"),
            }
            assert!(pc < SOCKET_FILTER.len(), "jumped past the end");
        }
    }

    #[test]
    #[cfg(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_endian = "little"
    ))]
    fn the_filter_allows_internet_and_routing_sockets_and_refuses_the_rest() {
        let deny = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let socket = libc::SYS_socket as u32;
        let pair = libc::SYS_socketpair as u32;
        let stream = libc::SOCK_STREAM as u32;
        let dgram = libc::SOCK_DGRAM as u32 | libc::SOCK_CLOEXEC as u32;
        let family = |f: i32| f as u32;
        for (call, args, expected) in [
            (socket, [family(libc::AF_INET), stream, 0], allow),
            (socket, [family(libc::AF_INET6), dgram, 0], allow),
            (socket, [family(libc::AF_NETLINK), dgram, 0], allow),
            (socket, [family(libc::AF_NETLINK), dgram, 9], deny),
            (socket, [family(libc::AF_UNIX), stream, 0], deny),
            (socket, [family(libc::AF_VSOCK), stream, 0], deny),
            (socket, [family(libc::AF_PACKET), dgram, 0], deny),
            (pair, [family(libc::AF_UNIX), stream, 0], allow),
            (
                pair,
                [family(libc::AF_UNIX), libc::SOCK_SEQPACKET as u32, 0],
                allow,
            ),
            (pair, [family(libc::AF_UNIX), dgram, 0], deny),
            (libc::SYS_io_uring_setup as u32, [1, 0, 0], deny),
            (X32_SYSCALL_BIT | 39, [0, 0, 0], deny),
            (libc::SYS_getpid as u32, [0, 0, 0], allow),
            (libc::SYS_connect as u32, [3, 0, 0], allow),
        ] {
            assert_eq!(verdict(AUDIT_ARCH, call, args), expected, "{call} {args:?}");
        }
        // i386 or AArch32 calls: the process is killed.
        assert_eq!(
            verdict(0x4000_0003, socket, [0, 0, 0]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn the_identity_map_is_one_line_of_the_id_to_itself() {
        assert_eq!(MapLine::new(1000).as_bytes(), b"1000 1000 1\n");
        assert_eq!(
            MapLine::new(u32::MAX).as_bytes(),
            b"4294967295 4294967295 1\n"
        );
    }
}
