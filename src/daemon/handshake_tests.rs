//! Tests of the handshake decisions: the HELLO built for each connection
//! kind and the judgement of every kind of HELLO_ACK, kept beside
//! `handshake.rs` so the decisions read without them.

use serde_json::json;

use super::*;
use crate::protocol::{decode, encode};

const HELLO_ID: &str = "6f1c0000-0000-4000-8000-000000000001";

fn data() -> ConnectionKind {
    ConnectionKind::Data {
        session_id: "session-1".to_owned(),
    }
}

fn input(envelope: Value) -> AckInput {
    AckInput::received(decode(envelope.to_string().as_bytes()))
}

fn ack(id: &str, payload: Value) -> AckInput {
    input(json!({"type": "HELLO_ACK", "id": id, "ts": 1.5, "version": "1.1", "payload": payload}))
}

fn data_payload() -> Value {
    json!({"session_id": "session-1", "connection_id": null, "protocol_version": "1.1",
           "granted_capabilities": ["files"], "max_file_size_bytes": 10485760,
           "command_timeout_seconds": 30, "max_concurrent": 4})
}

fn control_payload() -> Value {
    json!({"session_id": null, "connection_id": "presence-7", "protocol_version": "1.1",
           "granted_capabilities": ["files", "directory_browse"]})
}

fn with(mut payload: Value, key: &str, value: Value) -> Value {
    payload[key] = value;
    payload
}

fn check_data(input: AckInput) -> Result<Negotiated, AckFailure> {
    check_ack(
        HELLO_ID,
        &data(),
        &[Capability::Shell, Capability::Files],
        Limits::default(),
        input,
    )
}

fn check_control(input: AckInput) -> Result<Negotiated, AckFailure> {
    check_ack(
        HELLO_ID,
        &ConnectionKind::Control,
        &[Capability::Files, Capability::DirectoryBrowse],
        Limits::default(),
        input,
    )
}

fn refused(result: Result<Negotiated, AckFailure>) -> AckFailure {
    match result {
        Ok(negotiated) => panic!("accepted: {negotiated:?}"),
        Err(failure) => failure,
    }
}

fn assert_close(failure: &AckFailure, code: u16, reason: &str) {
    let close = failure.close().expect("a close to send");
    assert_eq!((close.code(), close.reason()), (code, reason));
}

// --- §4.4 step 1 -------------------------------------------------------

#[test]
fn no_ack_within_ten_seconds_leaves_normally_and_reconnects() {
    assert_eq!(HELLO_ACK_WAIT, Duration::from_secs(10));
    let failure = refused(check_data(AckInput::TimedOut));
    assert_eq!(failure.rejection.step(), "1");
    assert_eq!(failure.close(), Some(HandshakeClose::Normal));
    assert_close(&failure, 1000, "");
    assert_eq!(failure.after(), AfterFailure::Reconnect);
    assert_eq!(failure.received_terminal(), None);
    assert_eq!(failure.audit_reason(), "loop_error: HelloAckTimeout");
}

#[test]
fn close_before_ack_reconnects_with_backoff_unless_terminal() {
    for (code, reason) in [
        (Some(1000), "ws_closed_1000_unknown"),
        (Some(1001), "ws_closed_1001_unknown"),
        (Some(1006), "ws_closed_1006_unknown"),
        (Some(4401), "ws_closed_4401_unknown"),
        (Some(4408), "ws_closed_4408_unknown"),
        (None, "ws_closed_None_unknown"),
    ] {
        let failure = refused(check_data(AckInput::Closed {
            code,
            reason: String::new(),
        }));
        assert_eq!(failure.rejection.step(), "1");
        assert_eq!(failure.close(), None, "{code:?}: already closed");
        assert_eq!(failure.after(), AfterFailure::Reconnect, "{code:?}");
        assert_eq!(failure.received_terminal(), None);
        assert_eq!(failure.audit_reason(), reason);
        assert_eq!(failure.platform_reason(), None);
    }
}

#[test]
fn close_4400_or_4403_before_ack_is_a_refusal_with_the_platforms_reason() {
    for (code, kind) in [
        (4400, RefusalKind::InvalidHello),
        (4403, RefusalKind::BindingMismatch),
    ] {
        let failure = refused(check_data(AckInput::Closed {
            code: Some(code),
            reason: "machine does not match".into(),
        }));
        assert_eq!(failure.close(), None);
        assert_eq!(failure.after(), AfterFailure::Refused(kind));
        assert_eq!(failure.received_terminal(), None);
        assert_eq!(failure.audit_reason(), format!("ws_closed_{code}_unknown"));
        assert_eq!(failure.platform_reason(), Some("machine does not match"));
    }
}

#[test]
fn close_4426_to_4429_before_ack_is_terminal_and_audited_as_revocation() {
    for (code, terminal, reason) in [
        (
            4426,
            TerminalClose::ProtocolVersionMismatch,
            "ws_closed_4426_PROTOCOL_VERSION_MISMATCH",
        ),
        (
            4427,
            TerminalClose::SessionTakenOver,
            "ws_closed_4427_SESSION_TAKEN_OVER",
        ),
        (
            4428,
            TerminalClose::SessionRevoked,
            "ws_closed_4428_SESSION_REVOKED",
        ),
        (
            4429,
            TerminalClose::PlatformShutdown,
            "ws_closed_4429_PLATFORM_SHUTDOWN",
        ),
    ] {
        let failure = refused(check_control(AckInput::Closed {
            code: Some(code),
            reason: "bye".into(),
        }));
        assert_eq!(failure.close(), None);
        assert_eq!(failure.after(), AfterFailure::Terminal);
        assert_eq!(failure.received_terminal(), Some(terminal));
        assert_eq!(failure.audit_reason(), reason);
    }
}

// --- steps 2 and 3 -----------------------------------------------------

#[test]
fn invalid_ack_frame_leaves_normally_and_reconnects() {
    let not_json = AckInput::received(decode(b"{not json"));
    let unknown_key = ack(HELLO_ID, with(data_payload(), "extra", json!(1)));
    let no_grant = ack(HELLO_ID, json!({"session_id": "session-1"}));
    for bad in [not_json, unknown_key, no_grant] {
        let failure = refused(check_data(bad));
        assert!(
            matches!(failure.rejection, AckRejection::InvalidFrame(_)),
            "{failure:?}"
        );
        assert_eq!(failure.rejection.step(), "2");
        assert_eq!(failure.close(), Some(HandshakeClose::Normal));
        assert_eq!(failure.after(), AfterFailure::Reconnect);
        assert_eq!(failure.audit_reason(), "loop_error: InvalidHelloAck");
    }
}

#[test]
fn ack_with_a_limit_of_zero_or_an_empty_session_is_never_accepted() {
    for (key, value) in [
        ("max_concurrent", json!(0)),
        ("command_timeout_seconds", json!(-1)),
        ("max_file_size_bytes", json!(0)),
        ("session_id", json!("")),
    ] {
        let failure = refused(check_data(ack(HELLO_ID, with(data_payload(), key, value))));
        assert_eq!(failure.rejection.step(), "2", "{key}");
        assert_eq!(failure.after(), AfterFailure::Reconnect, "{key}");
    }
}

#[test]
fn first_frame_of_another_type_leaves_normally_and_reconnects() {
    let ping = input(json!({"type": "PING", "id": HELLO_ID, "ts": 1.0}));
    let failure = refused(check_data(ping));
    assert_eq!(
        failure.rejection,
        AckRejection::UnexpectedType(MessageType::Ping)
    );
    assert_eq!(failure.rejection.step(), "3");
    assert_eq!(failure.close(), Some(HandshakeClose::Normal));
    assert_eq!(failure.after(), AfterFailure::Reconnect);
}

// --- steps 4 to 9 ------------------------------------------------------

#[test]
fn ack_with_foreign_id_closes_4400_and_is_terminal() {
    let failure = refused(check_data(ack("someone-else", data_payload())));
    assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
    assert_close(&failure, 4400, "HELLO_ACK correlation mismatch");
    assert_eq!(failure.after(), AfterFailure::Terminal);
    assert_eq!(failure.received_terminal(), None);
    assert_eq!(
        failure.audit_reason(),
        "loop_error: HelloAckCorrelationMismatch"
    );
}

#[test]
fn ack_for_another_session_closes_4403_as_authentication_failure() {
    for session in [json!("session-2"), json!(null), json!("Session-1")] {
        let failure = refused(check_data(ack(
            HELLO_ID,
            with(data_payload(), "session_id", session.clone()),
        )));
        assert_eq!(
            failure.rejection,
            AckRejection::SessionMismatch,
            "{session}"
        );
        assert_eq!(failure.rejection.step(), "5a");
        assert_close(&failure, 4403, "HELLO_ACK session mismatch");
        assert_eq!(failure.after(), AfterFailure::TerminalAuthFailure);
    }
}

#[test]
fn control_ack_naming_a_session_closes_4403_as_authentication_failure() {
    let failure = refused(check_control(ack(
        HELLO_ID,
        with(control_payload(), "session_id", json!("session-1")),
    )));
    assert_eq!(failure.rejection, AckRejection::ControlMismatch);
    assert_eq!(failure.rejection.step(), "5b");
    assert_close(&failure, 4403, "HELLO_ACK control mismatch");
    assert_eq!(failure.after(), AfterFailure::TerminalAuthFailure);
}

#[test]
fn control_ack_without_session_key_is_accepted() {
    let mut payload = control_payload();
    if let Value::Object(map) = &mut payload {
        map.remove("session_id");
    }
    let negotiated = check_control(ack(HELLO_ID, payload)).expect("accepted");
    assert_eq!(negotiated.connection_id.as_deref(), Some("presence-7"));
}

#[test]
fn ack_granting_unadvertised_capability_closes_4400() {
    let only_files = |name: &str| {
        check_ack(
            HELLO_ID,
            &data(),
            &[Capability::Files],
            Limits::default(),
            ack(
                HELLO_ID,
                with(
                    data_payload(),
                    "granted_capabilities",
                    json!(["files", name]),
                ),
            ),
        )
    };
    for name in [
        "shell",
        "recording",
        "directory_browse",
        "teleport",
        "FILES",
    ] {
        let failure = refused(only_files(name));
        assert_eq!(
            failure.rejection,
            AckRejection::UnadvertisedCapability(name.to_owned())
        );
        assert_eq!(failure.rejection.step(), "7");
        assert_close(&failure, 4400, "HELLO_ACK granted unadvertised capability");
        assert_eq!(failure.after(), AfterFailure::Terminal);
    }
}

#[test]
fn malformed_platform_version_closes_4426_and_is_terminal() {
    for version in ["1", "v1.1", "1.1.0", " 1.1", ""] {
        let failure = refused(check_data(ack(
            HELLO_ID,
            with(data_payload(), "protocol_version", json!(version)),
        )));
        assert_eq!(failure.rejection.step(), "8", "{version:?}");
        assert_close(&failure, 4426, "Invalid platform protocol version");
        assert_eq!(failure.after(), AfterFailure::Terminal);
    }
}

#[test]
fn other_major_version_closes_4426_with_the_fitted_json_reason() {
    let failure = refused(check_data(ack(
        HELLO_ID,
        with(data_payload(), "protocol_version", json!("2.0")),
    )));
    assert_eq!(
        failure.rejection,
        AckRejection::MajorMismatch("2.0".to_owned())
    );
    assert_close(
        &failure,
        4426,
        r#"{"error":"PROTOCOL_VERSION_MISMATCH","shim_max":"1.1","platform_max":"2.0","hint":"upgrade the older side"}"#,
    );
    assert_eq!(failure.after(), AfterFailure::Terminal);
}

#[test]
fn control_connection_requires_1_1_directory_browse_and_connection_id() {
    for payload in [
        with(control_payload(), "protocol_version", json!("1.0")),
        with(control_payload(), "granted_capabilities", json!(["files"])),
        with(control_payload(), "connection_id", json!(null)),
        with(control_payload(), "connection_id", json!("")),
    ] {
        let failure = refused(check_control(ack(HELLO_ID, payload.clone())));
        assert_eq!(
            failure.rejection,
            AckRejection::ControlRequirements,
            "{payload}"
        );
        assert_eq!(failure.rejection.step(), "9");
        assert_close(
            &failure,
            4426,
            "Machine control requires protocol 1.1 and directory_browse",
        );
        assert_eq!(failure.after(), AfterFailure::Terminal);
    }
}

#[test]
fn data_connection_accepts_protocol_1_0() {
    let negotiated = check_data(ack(
        HELLO_ID,
        with(data_payload(), "protocol_version", json!("1.0")),
    ))
    .expect("accepted");
    assert_eq!(negotiated.version.to_string(), "1.0");
    let newer = check_data(ack(
        HELLO_ID,
        with(data_payload(), "protocol_version", json!("1.9")),
    ))
    .expect("accepted");
    assert_eq!(newer.version, SHIM_MAX_VERSION);
}

// --- order -------------------------------------------------------------

#[test]
fn invalid_frame_is_reported_before_a_wrong_id() {
    let failure = refused(check_data(ack(
        "someone-else",
        with(data_payload(), "max_concurrent", json!(0)),
    )));
    assert_eq!(failure.rejection.step(), "2");
}

#[test]
fn wrong_type_is_reported_before_a_wrong_id() {
    let pong = input(json!({"type": "PONG", "id": "someone-else", "ts": 1.0}));
    assert_eq!(refused(check_data(pong)).rejection.step(), "3");
}

#[test]
fn wrong_id_is_reported_before_a_session_mismatch() {
    let payload = with(data_payload(), "session_id", json!("session-2"));
    let failure = refused(check_data(ack("someone-else", payload)));
    assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
    assert_eq!(failure.after(), AfterFailure::Terminal);

    let control = with(control_payload(), "session_id", json!("session-2"));
    let failure = refused(check_control(ack("someone-else", control)));
    assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
}

#[test]
fn session_mismatch_is_reported_before_an_unadvertised_grant() {
    let payload = with(
        with(data_payload(), "session_id", json!("session-2")),
        "granted_capabilities",
        json!(["computer_use"]),
    );
    assert_eq!(
        refused(check_data(ack(HELLO_ID, payload))).rejection.step(),
        "5a"
    );
}

#[test]
fn unadvertised_grant_is_reported_before_a_version_mismatch() {
    let payload = with(
        with(data_payload(), "granted_capabilities", json!(["local_llm"])),
        "protocol_version",
        json!("2.0"),
    );
    assert_eq!(
        refused(check_data(ack(HELLO_ID, payload))).rejection.step(),
        "7"
    );
}

#[test]
fn version_mismatch_is_reported_before_control_requirements() {
    let payload = with(
        with(control_payload(), "granted_capabilities", json!(["files"])),
        "protocol_version",
        json!("x"),
    );
    assert_eq!(
        refused(check_control(ack(HELLO_ID, payload)))
            .rejection
            .step(),
        "8"
    );
}

// --- success and limits --------------------------------------------------

#[test]
fn accepted_ack_fixes_the_granted_subset_version_and_connection_id() {
    let payload = with(
        with(
            control_payload(),
            "granted_capabilities",
            json!(["directory_browse", "files"]),
        ),
        "protocol_version",
        json!("01.1"),
    );
    let negotiated = check_control(ack(HELLO_ID, payload)).expect("accepted");
    assert_eq!(negotiated.version, SHIM_MAX_VERSION);
    assert_eq!(
        negotiated.granted,
        BTreeSet::from([Capability::Files, Capability::DirectoryBrowse])
    );
    assert_eq!(
        negotiated.granted_as_sent,
        vec![Capability::DirectoryBrowse, Capability::Files]
    );
    assert_eq!(
        negotiated.granted_names_sorted(),
        vec!["directory_browse", "files"]
    );
    assert_eq!(negotiated.connection_id.as_deref(), Some("presence-7"));
}

#[test]
fn empty_grant_is_accepted_on_a_data_connection() {
    let negotiated = check_data(ack(
        HELLO_ID,
        with(data_payload(), "granted_capabilities", json!([])),
    ))
    .expect("accepted");
    assert!(negotiated.granted.is_empty());
}

#[test]
fn platform_can_lower_limits_but_never_raise_them() {
    let n = |v: u64| NonZeroU64::new(v).expect("non-zero");
    let ceilings = Limits {
        max_concurrent: n(4),
        command_timeout_seconds: n(30),
        max_file_size_bytes: n(1000),
    };
    let payload = json!({"session_id": "session-1", "granted_capabilities": ["files"],
                         "max_concurrent": 2, "command_timeout_seconds": 300,
                         "max_file_size_bytes": 999});
    let negotiated = check_ack(
        HELLO_ID,
        &data(),
        &[Capability::Files],
        ceilings,
        ack(HELLO_ID, payload),
    )
    .expect("accepted");
    assert_eq!(
        negotiated.limits,
        Limits {
            max_concurrent: n(2),
            command_timeout_seconds: n(30),
            max_file_size_bytes: n(999),
        }
    );

    // Omitted values default to 4 / 30 / 10 MiB and cannot exceed tighter ceilings.
    let tight = Limits {
        max_concurrent: n(1),
        command_timeout_seconds: n(5),
        max_file_size_bytes: n(10),
    };
    let negotiated = check_ack(
        HELLO_ID,
        &data(),
        &[Capability::Files],
        tight,
        ack(
            HELLO_ID,
            json!({"session_id": "session-1", "granted_capabilities": []}),
        ),
    )
    .expect("accepted");
    assert_eq!(negotiated.limits, tight);
    let roomy = Limits {
        max_concurrent: n(64),
        command_timeout_seconds: n(3600),
        max_file_size_bytes: n(u64::MAX),
    };
    let negotiated = check_ack(
        HELLO_ID,
        &data(),
        &[Capability::Files],
        roomy,
        ack(
            HELLO_ID,
            json!({"session_id": "session-1", "granted_capabilities": []}),
        ),
    )
    .expect("accepted");
    assert_eq!(negotiated.limits, Limits::default());
}

// --- advertising ---------------------------------------------------------

#[test]
fn default_gates_advertise_files_and_control_appends_directory_browse() {
    let gates = Gates::default();
    assert_eq!(
        advertised_capabilities(&gates, &data()),
        vec![Capability::Files]
    );
    assert_eq!(
        advertised_capabilities(&gates, &ConnectionKind::Control),
        vec![Capability::Files, Capability::DirectoryBrowse]
    );
}

#[test]
fn every_gate_on_advertises_in_specified_order_without_recording() {
    let gates = Gates {
        enable_shell: true,
        enable_computer_use: true,
        computer_use_backend: true,
        enable_local_llm: true,
        local_llm_models_found: true,
        enable_hardware: true,
        serial_support: true,
        usb_support: true,
        gpio_support: true,
    };
    let names: Vec<_> = advertised_capabilities(&gates, &ConnectionKind::Control)
        .into_iter()
        .map(Capability::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "shell",
            "files",
            "computer_use",
            "local_llm",
            "hardware_serial",
            "hardware_usb",
            "hardware_gpio",
            "directory_browse"
        ]
    );
    let on_data = advertised_capabilities(&gates, &data());
    assert!(!on_data.contains(&Capability::DirectoryBrowse));
    assert!(!on_data.contains(&Capability::Recording));
}

#[test]
fn dependency_without_local_switch_advertises_nothing() {
    let probed_only = Gates {
        computer_use_backend: true,
        local_llm_models_found: true,
        serial_support: true,
        usb_support: true,
        gpio_support: true,
        ..Gates::default()
    };
    assert_eq!(
        advertised_capabilities(&probed_only, &data()),
        vec![Capability::Files]
    );
    let switched_only = Gates {
        enable_computer_use: true,
        enable_local_llm: true,
        enable_hardware: true,
        ..Gates::default()
    };
    assert_eq!(
        advertised_capabilities(&switched_only, &data()),
        vec![Capability::Files]
    );
    let shell = Gates {
        enable_shell: true,
        ..Gates::default()
    };
    assert_eq!(
        advertised_capabilities(&shell, &data()),
        vec![Capability::Shell, Capability::Files]
    );
}

// --- HELLO -------------------------------------------------------------

fn identity() -> Identity {
    Identity {
        machine_id: "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f".to_owned(),
        display_name: "alice-laptop".to_owned(),
        platform: Platform::Linux,
        arch: Arch::X86_64,
    }
}

fn probes() -> Probes {
    let device = |kind: &str| {
        let mut map = Map::new();
        map.insert("type".to_owned(), json!(kind));
        map
    };
    Probes {
        screen_resolution: Some([1920, 1080]),
        local_llm_models: vec!["llama3".to_owned()],
        hardware_devices: vec![device("serial"), device("usb"), device("gpio")],
        computer_use_features: vec!["screenshot.region".to_owned()],
        computer_use_features_coarse: vec!["screenshot".to_owned()],
    }
}

fn payload_of(hello: Hello) -> Value {
    let frame = Frame::new(HELLO_ID, 1.5, Message::Hello(hello));
    let bytes = encode(&frame).expect("encodes");
    let value: Value = serde_json::from_str(&bytes).expect("json");
    value["payload"].clone()
}

#[test]
fn data_hello_matches_the_specification_example() {
    let hello = build_hello(
        &identity(),
        &data(),
        Some("/home/alice/projects/site"),
        &[Capability::Shell, Capability::Files],
        Probes::default(),
    );
    assert_eq!(
        payload_of(hello),
        json!({"shim_version": SHIM_VERSION,
               "machine_id": "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f",
               "display_name": "alice-laptop", "platform": "linux", "arch": "x86_64",
               "screen_resolution": null, "capabilities": ["shell", "files"],
               "allowed_root": "/home/alice/projects/site", "local_llm_models": [],
               "hardware_devices": [], "computer_use_features": [],
               "computer_use_features_coarse": [], "recording_channels": [],
               "recording_routes": [], "protocol_version": "1.1"})
    );
}

#[test]
fn control_hello_sends_null_root_even_when_one_is_passed() {
    let hello = build_hello(
        &identity(),
        &ConnectionKind::Control,
        Some("/home/alice"),
        &[Capability::Files, Capability::DirectoryBrowse],
        Probes::default(),
    );
    assert_eq!(hello.allowed_root, None);
    let payload = payload_of(hello);
    assert_eq!(payload["allowed_root"], Value::Null);
    assert_eq!(
        payload["capabilities"],
        json!(["files", "directory_browse"])
    );
}

#[test]
fn probe_results_of_unadvertised_capabilities_are_not_sent() {
    let hello = build_hello(
        &identity(),
        &data(),
        Some("/r"),
        &[Capability::Files],
        probes(),
    );
    assert_eq!(hello.screen_resolution, None);
    assert!(hello.local_llm_models.is_empty());
    assert!(hello.hardware_devices.is_empty());
    assert!(hello.computer_use_features.is_empty());
    assert!(hello.computer_use_features_coarse.is_empty());
    assert!(hello.recording_channels.is_empty());
    assert!(hello.recording_routes.is_empty());
}

#[test]
fn probe_results_of_advertised_capabilities_are_sent() {
    let hello = build_hello(
        &identity(),
        &data(),
        Some("/r"),
        &[
            Capability::Files,
            Capability::ComputerUse,
            Capability::LocalLlm,
            Capability::HardwareUsb,
        ],
        probes(),
    );
    assert_eq!(hello.screen_resolution, Some([1920, 1080]));
    assert_eq!(hello.local_llm_models, vec!["llama3".to_owned()]);
    assert_eq!(
        hello.computer_use_features,
        vec!["screenshot.region".to_owned()]
    );
    assert_eq!(
        hello.computer_use_features_coarse,
        vec!["screenshot".to_owned()]
    );
    let kinds: Vec<_> = hello
        .hardware_devices
        .iter()
        .map(|d| d["type"].as_str())
        .collect();
    assert_eq!(kinds, vec![Some("usb")]);
    assert_eq!(hello.shim_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(hello.protocol_version, "1.1");
}
