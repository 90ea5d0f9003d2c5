//! `command_network = "none"` end to end: the real binary and the platform
//! emulator, commands in their own user and network namespace behind the
//! socket filter. A command cannot reach a server of the host on
//! 127.0.0.1, a Unix socket of the host or any route out, while its own
//! loopback works, and the record says `"net": "namespace"`.
//!
//! The degraded paths use a real kernel limit rather than a mock: the
//! shim is started inside a user namespace of the test whose
//! `user.max_user_namespaces` is lowered (the limit is per namespace, so
//! nothing outside the test changes). At 0 the probe at start fails; at 1
//! the probe passes but a second concurrent command finds no namespace
//! left, which is a per-command setup failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::Duration;

use autogpt_shim_emulator::{Conn, Emulator, HelloAck};
use rustix::process::Signal;
use serde_json::{Value, json};
use start_support::*;

fn run(conn: &Conn, command: &str) -> (String, Value) {
    let (id, result) = call(conn, "EXECUTE_COMMAND", json!({"command": command}));
    assert_eq!(result["type"], "COMMAND_RESULT", "{result}");
    (id, result["payload"].clone())
}

fn details_of(home: &Home, id: &str) -> Value {
    home.records()
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap_or_else(|| panic!("no record for {id}"))["details"]
        .clone()
}

fn stop(mut shim: Shim) {
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

/// Whether this kernel lets the shim isolate a command, by the shim's own
/// probe (the same one `start` runs).
fn isolation_available() -> bool {
    autogpt_shim::exec::sandbox::probe_network(std::path::Path::new(BIN)).is_ok()
}

/// `autogpt-shim start --session-id … --enable-shell [extra]`, run inside
/// a new user namespace whose `user.max_user_namespaces` is `limit`.
fn start_with_namespace_limit(
    home: &Home,
    emulator: &Emulator,
    limit: u32,
    settings: &[(&str, &str)],
    extra: &[&str],
) -> Shim {
    let mut args = platform_args(emulator);
    args.extend(["start", "--session-id", SESSION, "--enable-shell"].map(String::from));
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let inner = home.command(&args);
    let mut wrapped = Command::new("unshare");
    wrapped.env_clear();
    for (name, value) in inner.get_envs() {
        if let Some(value) = value {
            wrapped.env(name, value);
        }
    }
    wrapped.envs(settings.iter().copied());
    let script = format!("echo {limit} > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"");
    wrapped
        .args(["--user", "--map-root-user", "sh", "-c", &script, BIN])
        .args(inner.get_args());
    Shim::spawn(wrapped)
}

#[test]
fn none_cuts_commands_off_the_host_and_every_route_but_keeps_their_own_loopback() {
    let home = Home::new();
    let emulator = emulator();
    if !isolation_available() {
        // No namespaces here: the only correct outcome is the refusal.
        let mut shim = Shim::start(&home, &emulator, &["--command-network", "none"]);
        assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
        assert!(shim.output().contains("namespace"), "{}", shim.output());
        return;
    }
    // A server of the host on loopback, and a Unix socket of the host,
    // both outside anything the command may reach.
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let socket_path = home.path().join("host.sock");
    let unix = UnixListener::bind(&socket_path).unwrap();
    unix.set_nonblocking(true).unwrap();

    let shim = Shim::start(
        &home,
        &emulator,
        &["--enable-shell", "--command-network", "none"],
    );
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));

    // The namespace has its loopback and nothing else, so no route leaves.
    let (id, p) = run(
        &conn,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo routes; tail -n +2 /proc/net/route",
    );
    assert_eq!(p["exit_code"], 0, "{p}");
    assert_eq!(p["stdout"], "lo\nroutes\n", "{p}");
    assert_eq!(
        details_of(&home, &id)["sandbox"],
        json!({"fs": "off", "net": "namespace"})
    );

    // The user is still the user.
    let uid = rustix::process::geteuid().as_raw();
    let (_, p) = run(&conn, "id -u");
    assert_eq!(p["stdout"], format!("{uid}\n"), "{p}");

    // The host's loopback server is not reachable (that 127.0.0.1 is the
    // namespace's own).
    let (_, p) = run(
        &conn,
        &format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo connected"),
    );
    assert_ne!(p["exit_code"], 0, "{p}");
    assert_eq!(p["stdout"], "", "{p}");
    assert!(tcp.accept().is_err(), "the host's server was reached");

    // Nor is any address beyond it: there is no route (checked above, so
    // nothing can leave the namespace even if this were wrong).
    let (_, p) = run(
        &conn,
        "bash -c 'echo hi > /dev/tcp/192.0.2.1/80' && echo connected",
    );
    assert_ne!(p["exit_code"], 0, "{p}");
    assert!(p["stderr"].as_str().unwrap().contains("unreachable"), "{p}");

    // The host's Unix socket cannot be reached: the filter refuses the
    // socket before the path is even looked at.
    let (_, p) = run(
        &conn,
        &format!(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")'",
            socket_path.display()
        ),
    );
    assert_ne!(p["exit_code"], 0, "{p}");
    assert!(
        p["stderr"].as_str().unwrap().contains("PermissionError"),
        "{p}"
    );
    assert!(unix.accept().is_err(), "the host's Unix socket was reached");

    // A Unix datagram pair could still send to a path; it is refused too,
    // while a connected stream pair (for talking to a child) works.
    let (_, p) = run(
        &conn,
        "python3 -c '\
import socket
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); a.send(b\"pair\"); print(b.recv(4).decode())
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
except PermissionError:
    print(\"refused\")'",
    );
    assert_eq!(p["stdout"], "pair\nrefused\n", "{p}");

    // io_uring, which could create sockets without the `socket` system
    // call, is refused the same way, and so are x32 system calls, which the
    // filter does not inspect.
    let (_, p) = run(
        &conn,
        "python3 -c '\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
print(libc.syscall(425, 1, params), ctypes.get_errno())'",
    );
    assert_eq!(p["stdout"], "-1 13\n", "{p}");
    if cfg!(target_arch = "x86_64") {
        let (_, p) = run(
            &conn,
            "python3 -c '\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall(0x40000000 | 39), ctypes.get_errno())'",
        );
        assert_eq!(p["stdout"], "-1 13\n", "{p}");
    }
    assert!(tcp.accept().is_err(), "the host's server was reached");

    // The namespace's own loopback works, TCP and UDP.
    let (_, p) = run(
        &conn,
        "python3 -c '\
import socket
server = socket.socket(); server.bind((\"127.0.0.1\", 0)); server.listen()
client = socket.create_connection(server.getsockname()); peer, _ = server.accept()
client.sendall(b\"tcp\"); print(peer.recv(3).decode())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((\"127.0.0.1\", 0))
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"udp\", u.getsockname()); print(u.recv(3).decode())'",
    );
    assert_eq!(p["exit_code"], 0, "{p}");
    assert_eq!(p["stdout"], "tcp\nudp\n", "{p}");
    stop(shim);
}

#[test]
fn none_without_namespaces_stops_start_naming_the_missing_part_and_the_remedy() {
    let home = Home::new();
    let emulator = emulator();
    let mut shim =
        start_with_namespace_limit(&home, &emulator, 0, &[], &["--command-network", "none"]);
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    let stderr = shim.stderr.text();
    assert!(
        stderr.contains("a user and network namespace could not be created"),
        "{stderr}"
    );
    assert!(stderr.contains("max_user_namespaces"), "{stderr}");
    assert!(stderr.contains("command_sandbox_fallback"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.contains("Preflight")).count(),
        1,
        "{stderr}"
    );
}

#[test]
fn none_without_namespaces_runs_with_the_network_only_when_chosen_and_says_so_everywhere() {
    let home = Home::new();
    let emulator = emulator();
    let shim = start_with_namespace_limit(
        &home,
        &emulator,
        0,
        &[("AUTOGPT_SHIM_COMMAND_SANDBOX_FALLBACK", "unconfined")],
        &["--command-network", "none"],
    );
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    // Once at start.
    assert!(
        eventually(WAIT, || shim.stderr.text().contains("UNAVAILABLE")),
        "{}",
        shim.output()
    );
    assert!(shim.stderr.text().contains("network isolation"));
    // In every command's record.
    let (id, p) = run(&conn, "echo ran");
    assert_eq!(p["stdout"], "ran\n", "{p}");
    assert_eq!(
        details_of(&home, &id)["sandbox"],
        json!({"fs": "off", "net": "unavailable"})
    );
    // And in `status`.
    let status = home.command(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("command sandbox: files unconfined; network UNAVAILABLE"),
        "{text}"
    );
    stop(shim);
}

#[test]
fn a_command_whose_namespace_cannot_be_made_is_refused_and_never_runs_with_the_network() {
    if !isolation_available() {
        return;
    }
    let home = Home::new();
    let emulator = emulator();
    // One namespace: the probe's (gone again) and then one command's.
    let shim = start_with_namespace_limit(&home, &emulator, 1, &[], &["--command-network", "none"]);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    // The first command takes the one namespace; the kernel frees the
    // probe's shortly after it ends, so the first try may still be refused.
    let held = loop {
        let id = conn
            .request(
                "EXECUTE_COMMAND",
                json!({"command": "touch started; while [ ! -e release ]; do sleep 0.05; done"}),
            )
            .unwrap();
        if eventually(Duration::from_secs(3), || {
            home.root.join("started").exists()
        }) {
            break id;
        }
        let refused = response_within(&conn, &id, WAIT);
        assert_eq!(refused["type"], "ERROR", "{refused}");
        std::thread::sleep(Duration::from_millis(100));
    };

    let (id, refused) = call(
        &conn,
        "EXECUTE_COMMAND",
        json!({"command": "touch second-ran"}),
    );
    assert_eq!(refused["type"], "ERROR", "{refused}");
    assert_eq!(
        refused["payload"]["code"], "CAPABILITY_NOT_GRANTED",
        "{refused}"
    );
    assert_eq!(
        refused["payload"]["details"]["reason"], "network_isolation_unavailable",
        "{refused}"
    );
    let message = refused["payload"]["message"].as_str().unwrap();
    assert!(message.contains("namespace"), "{message}");
    assert!(!home.root.join("second-ran").exists());
    let record = home
        .records()
        .into_iter()
        .find(|r| r["request_id"] == id)
        .unwrap();
    assert_eq!(record["details"]["sandbox"]["net"], "namespace", "{record}");
    assert_eq!(record["result"]["exit_code"], Value::Null, "{record}");
    assert_eq!(
        record["result"]["error_code"], "CAPABILITY_NOT_GRANTED",
        "{record}"
    );

    // Once the first command is done, its namespace is freed again (the
    // kernel frees it shortly after its last process, not at once).
    std::fs::write(home.root.join("release"), "").unwrap();
    let first = response_within(&conn, &held, WAIT);
    assert_eq!(first["payload"]["exit_code"], 0, "{first}");
    assert!(
        eventually(WAIT, || {
            let (_, answer) = call(&conn, "EXECUTE_COMMAND", json!({"command": "echo again"}));
            answer["type"] == "COMMAND_RESULT" && answer["payload"]["stdout"] == "again\n"
        }),
        "commands stayed refused after the namespace was freed"
    );
    stop(shim);
}

#[test]
fn a_bad_network_mode_is_a_usage_or_configuration_error() {
    let home = Home::new();
    let out = home
        .command(&["start", "--command-network", "host"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let mut command = home.command(&["start"]);
    command.env("AUTOGPT_SHIM_COMMAND_NETWORK", "host");
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("command_network"));
}

#[test]
fn both_sandboxes_together_confine_files_and_network_and_record_both() {
    if !isolation_available() || autogpt_shim::exec::sandbox::probe_landlock().is_err() {
        return;
    }
    let abi = autogpt_shim::exec::sandbox::probe_landlock().unwrap() as i64;
    let home = Home::new();
    let emulator = emulator();
    let outside = home.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let shim = Shim::start(
        &home,
        &emulator,
        &[
            "--enable-shell",
            "--command-network",
            "none",
            "--command-sandbox",
            "workspace",
        ],
    );
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    let (id, p) = run(
        &conn,
        &format!(
            "echo in > inside.txt; echo out > '{}/x'; echo > /dev/tcp/127.0.0.1/{port} || echo refused",
            outside.display()
        ),
    );
    assert_eq!(p["stdout"], "refused\n", "{p}");
    assert!(tcp.accept().is_err(), "the host's server was reached");
    assert!(home.root.join("inside.txt").exists());
    assert!(!outside.join("x").exists());
    assert_eq!(
        details_of(&home, &id)["sandbox"],
        json!({"fs": format!("landlock-v{abi}"), "net": "namespace"})
    );
    stop(shim);
}

#[test]
fn none_isolates_the_commands_of_a_user_who_is_not_root() {
    use std::os::unix::process::CommandExt;
    if !runs_as_root("none_isolates_the_commands_of_a_user_who_is_not_root") {
        return;
    }
    let home = Home::new();
    let emulator = plain_emulator();
    let url = emulator.platform_url();
    let mut command = home.command(&[
        "--platform-url",
        &url,
        "start",
        "--session-id",
        SESSION,
        "--enable-shell",
        "--command-network",
        "none",
    ]);
    give_to_nobody(home.path());
    command.uid(NOBODY).gid(NOBODY);
    let shim = Shim::spawn(command);
    let (conn, _) = connect(&emulator, HelloAck::new().grant(["files", "shell"]));
    let (id, p) = run(
        &conn,
        "id -u; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    );
    assert_eq!(p["stdout"], format!("{NOBODY}\nlo\n"), "{p}");
    assert_eq!(details_of(&home, &id)["sandbox"]["net"], "namespace");
    stop(shim);
}
