//! Hardware discovery in the `HELLO` of the real `autogpt-shim start`
//! binary (CAPABILITIES.md §2 and §6), on this machine's own `/sys` and
//! `/dev`: with `enable_hardware` on, the HELLO carries the capabilities
//! whose dependency checks pass here ([`support`]) in their place in the
//! order, and the devices [`discover`] finds here; with it off, neither.
//! Either way the platform emulator accepts the HELLO and the connection
//! serves.
//!
//! What this machine has is not known in advance (a build machine usually
//! has `/sys/class/tty` and nothing else), so the expectation is computed
//! here by the library's own discovery; `tests/hardware_discovery.rs`
//! checks that discovery against constructed trees and an independent
//! listing of this machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use autogpt_shim::hardware::{Roots, discover, support};
use autogpt_shim_emulator::{ConnKind, HelloAck, hello_problems};
use serde_json::{Value, json};
use start_support::*;

const ENABLE: (&str, &str) = ("AUTOGPT_SHIM_ENABLE_HARDWARE", "true");

/// The hardware capabilities this machine supports, in HELLO order.
fn supported_here() -> Vec<&'static str> {
    let support = support(&Roots::system());
    [
        ("hardware_serial", support.serial),
        ("hardware_usb", support.usb),
        ("hardware_gpio", support.gpio),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

/// The devices this machine has whose capability is supported here.
fn devices_here() -> Value {
    let supported = supported_here();
    let devices: Vec<Value> = discover(&Roots::system())
        .into_iter()
        .filter(|device| {
            let capability = format!("hardware_{}", device["type"].as_str().unwrap());
            supported.contains(&capability.as_str())
        })
        .map(Value::Object)
        .collect();
    Value::Array(devices)
}

fn capabilities(hello: &Value) -> Vec<String> {
    hello["payload"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

/// The HELLO passes the platform's checks for a connection of `kind`.
fn assert_valid(hello: &Value, kind: &ConnKind) {
    let problems = hello_problems(hello, kind);
    assert!(problems.is_empty(), "{problems:?}\n{hello}");
}

#[test]
fn enabled_hardware_advertises_what_this_machine_supports_with_its_devices() {
    let home = Home::new();
    let emulator = emulator();
    let _shim = Shim::start_with_env(&home, &emulator, &[ENABLE], &[]);
    // Everything advertised is granted.
    let (conn, hello) = connect(&emulator, HelloAck::new());
    assert_valid(&hello, conn.kind());
    let mut expected = vec!["files"];
    expected.extend(supported_here());
    assert_eq!(capabilities(&hello), expected, "{hello}");
    assert_eq!(hello["payload"]["hardware_devices"], devices_here());
    for device in hello["payload"]["hardware_devices"].as_array().unwrap() {
        assert!(device.get("serial").is_none(), "{device}");
    }
    // The connection serves with the grant.
    settle(&conn);
    let (_, listed) = call(&conn, "FILE_LIST", json!({"path": "."}));
    assert_eq!(listed["type"], "FILE_LIST_RESPONSE", "{listed}");
}

#[test]
fn the_hello_after_a_reconnect_carries_the_hardware_again() {
    let home = Home::new();
    let emulator = emulator();
    let _shim = Shim::start_with_env(&home, &emulator, &[ENABLE], &[]);
    let (conn, first) = connect(&emulator, HelloAck::new());
    conn.drop_tcp().unwrap();
    conn.wait_closed(WAIT).unwrap();
    let (conn, second) = connect(&emulator, HelloAck::new());
    assert_valid(&second, conn.kind());
    assert_eq!(
        second["payload"]["capabilities"],
        first["payload"]["capabilities"]
    );
    assert_eq!(second["payload"]["hardware_devices"], devices_here());
    settle(&conn);
}

#[test]
fn the_control_connection_advertises_hardware_before_directory_browse() {
    let home = Home::new();
    let emulator = emulator();
    let _shim = Shim::start_control_with_env(&home, &emulator, &[ENABLE], &[]);
    let (conn, hello) = accept_with(&emulator, &HelloAck::new());
    assert_eq!(conn.kind(), &ConnKind::Control);
    assert_valid(&hello, conn.kind());
    let mut expected = vec!["files"];
    expected.extend(supported_here());
    expected.push("directory_browse");
    assert_eq!(capabilities(&hello), expected, "{hello}");
    assert_eq!(hello["payload"]["hardware_devices"], devices_here());
    settle(&conn);
}

#[test]
fn without_the_switch_no_hardware_is_advertised_and_no_device_listed() {
    for switch in [None, Some("false")] {
        let home = Home::new();
        let emulator = emulator();
        let env: Vec<(&str, &str)> = switch
            .map(|value| ("AUTOGPT_SHIM_ENABLE_HARDWARE", value))
            .into_iter()
            .collect();
        let _shim = Shim::start_with_env(&home, &emulator, &env, &[]);
        let (conn, hello) = connect(&emulator, HelloAck::new());
        assert_valid(&hello, conn.kind());
        assert_eq!(capabilities(&hello), ["files"], "{hello}");
        assert_eq!(hello["payload"]["hardware_devices"], json!([]));
        settle(&conn);
    }
}
