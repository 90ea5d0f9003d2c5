//! Every JSON example of PROTOCOL.md and CONTROL.md decodes, and encodes back
//! to the same message. Examples are verbatim except where the specification
//! elides a value with "…" in a place the schema constrains (a 64-hex
//! fingerprint, a numeric `ts`, a truncated object); there a concrete value
//! stands in, noted beside the example.

use autogpt_shim::protocol::{self, Frame, Message};
use serde_json::Value;

const FINGERPRINT: &str = "568a8199aa1bd62c5e1b4e2f7c9d0a3b6e8f1c2d4a5b6c7d8e9f0a1b2cf62f57";

fn examples() -> Vec<String> {
    let mut out: Vec<String> = vec![
        // PROTOCOL.md §4.2
        r#"{"id":"6f1c…","ts":1712345678.123,"version":"1.1","pending_capacity":null,"type":"HELLO",
 "payload":{"shim_version":"0.1.0","machine_id":"4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f",
  "display_name":"alice-laptop","platform":"linux","arch":"x86_64","screen_resolution":null,
  "capabilities":["shell","files"],"allowed_root":"/home/alice/projects/site",
  "local_llm_models":[],"hardware_devices":[],"computer_use_features":[],
  "computer_use_features_coarse":[],"recording_channels":[],"recording_routes":[],
  "protocol_version":"1.1"}}"#.into(),
        // §4.3
        r#"{"type":"HELLO_ACK","id":"6f1c…","ts":1712345678.2,"version":"1.1",
 "payload":{"session_id":"session-1","connection_id":null,"protocol_version":"1.1",
  "granted_capabilities":["files"],"max_file_size_bytes":10485760,
  "command_timeout_seconds":30,"max_concurrent":4}}"#.into(),
        // §5.2 (the example elides ts: a number stands in)
        r#"{"type":"ERROR","id":"<request id>","ts":1712345678.5,"version":"1.1","pending_capacity":0,
 "payload":{"code":"SHIM_OVERLOADED","message":"The local executor is at its concurrent request limit.",
  "fatal":false,"details":{"max_concurrent":4}}}"#.into(),
        // §5.3 (the example elides id, ts and the envelope tail)
        r#"{"type":"ERROR","id":"e1","payload":{"code":"CAPABILITY_NOT_GRANTED",
 "message":"The platform did not grant the 'files' capability.","fatal":false,
 "details":{"required_capability":"files","granted_capabilities":["directory_browse"]}}, "ts":1.0}"#.into(),
        // §7.1
        r#"{"type":"EXECUTE_COMMAND","id":"req-1","ts":1712345678.0,"version":"1.1",
 "payload":{"command":null,"argv":["ls","-la"],"shell":"auto","cwd":"/home/alice/projects/site",
  "timeout_seconds":20,"env":{"MY_VAR":"value"}}}"#.into(),
        r#"{"type":"COMMAND_RESULT","id":"req-1","ts":1712345678.2,"version":"1.1","pending_capacity":4,
 "payload":{"stdout":"total 8\n…","stderr":"","exit_code":0,"timed_out":false,
  "duration_seconds":0.043,"output_truncated":false}}"#.into(),
        // §7.2–§7.7
        r#"{"type":"FILE_READ","id":"r1","ts":1.0,"payload":{"path":"/home/alice/p/data.csv","encoding":"utf-8","format":"text","offset":0,"length":null}}"#.into(),
        r#"{"type":"FILE_CONTENTS","id":"r1","ts":1.1,"version":"1.1","pending_capacity":4,"payload":{"content":"a,b\n1,2\n","encoding":"utf-8","size_bytes":8,"truncated":false}}"#.into(),
        r#"{"type":"FILE_WRITE","id":"w1","ts":1.0,"payload":{"path":"/home/alice/p/out.txt","content":"hello\n","encoding":"utf-8","create_parents":true}}"#.into(),
        r#"{"type":"ACK","id":"w1","ts":1.1,"version":"1.1","pending_capacity":4,"payload":{"ok":true}}"#.into(),
        r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"payload":{"path":"/home/alice/p/data.csv","follow_symlinks":true}}"#.into(),
        r#"{"type":"FILE_STAT_RESPONSE","id":"s1","ts":1.1,"version":"1.1","pending_capacity":4,"payload":{"exists":true,"is_file":true,"is_dir":false,"is_symlink":false,"size_bytes":8,"mtime":1712345600.5,"ctime":1712345600.5,"mode":"0644","owner_uid":501,"owner_gid":20,"mime_type":"text/csv","path":"/home/alice/p/data.csv"}}"#.into(),
        r#"{"type":"FILE_LIST","id":"l1","ts":1.0,"payload":{"path":"/home/alice/p","glob":"*.csv","recursive":false,"include_hidden":false,"max_entries":1000}}"#.into(),
        r#"{"type":"FILE_LIST_RESPONSE","id":"l1","ts":1.1,"version":"1.1","pending_capacity":4,"payload":{"entries":[{"name":"data.csv","path":"/home/alice/p/data.csv","is_file":true,"is_dir":false,"is_symlink":false,"size_bytes":8,"mtime":1712345600.5}],"truncated":false}}"#.into(),
        r#"{"type":"FILE_DELETE","id":"d1","ts":1.0,"payload":{"path":"/home/alice/p/old.csv","recursive":false,"missing_ok":true}}"#.into(),
        r#"{"type":"FILE_MOVE","id":"m1","ts":1.0,"payload":{"src":"/home/alice/p/a.csv","dst":"/home/alice/p/b.csv","overwrite":false}}"#.into(),
        r#"{"type":"ACK","id":"d1","ts":1.1,"version":"1.1","pending_capacity":4,"payload":{"ok":true}}"#.into(),
        // §7.9
        r#"{"type":"ERROR","id":"r9","ts":1.0,"version":"1.1","pending_capacity":3,"payload":{"code":"PATH_OUTSIDE_ALLOWED_ROOT","message":"Path '/etc/passwd' (resolved to '/etc/passwd') is outside allowed_root '/home/alice/p'","fatal":false,"details":null}}"#.into(),
        // §7.10–§7.12
        r#"{"type":"PING","id":"k1","ts":1.0,"payload":{}}"#.into(),
        r#"{"id":"k1","ts":1.0004,"version":"1.1","pending_capacity":null,"type":"PONG","payload":{}}"#.into(),
        r#"{"id":"9b2e…","ts":1712345708.1,"version":"1.1","pending_capacity":3,"type":"STATUS","payload":{"in_flight":1,"max_concurrent":4,"queue_depth":0,"audit_log_bytes":12345,"uptime_seconds":30.0}}"#.into(),
        r#"{"type":"SESSION_REVOKED","id":"x1","ts":1.0,"version":"1.1","payload":{"reason":"another_shim_connected","new_shim_machine_id":"macbook-air-7f3c"}}"#.into(),
        // §7.13
        r#"{"type":"LOCAL_LLM_COMPLETION","id":"q1","ts":1.0,"version":"1.1","payload":{"model":"llama3.2:3b","messages":[{"role":"user","content":"hi"}],"max_tokens":256,"temperature":0.0,"top_p":1.0,"stream":true}}"#.into(),
        r#"{"type":"LOCAL_LLM_COMPLETION_CHUNK","id":"q1","ts":1.1,"version":"1.1","pending_capacity":null,"payload":{"delta":"Hello","finish_reason":null}}"#.into(),
        r#"{"type":"LOCAL_LLM_COMPLETION_CHUNK","id":"q1","ts":1.2,"version":"1.1","pending_capacity":null,"payload":{"delta":"","finish_reason":"stop"}}"#.into(),
        r#"{"type":"LOCAL_LLM_COMPLETION_RESPONSE","id":"q1","ts":1.2,"version":"1.1","pending_capacity":4,"payload":{"content":"Hello","finish_reason":"stop","tokens":{"prompt":12,"completion":1,"total":13},"duration_seconds":0.231}}"#.into(),
        // CONTROL.md §4.3, §4.5
        r#"{"type":"DIRECTORY_LIST_REQUEST","id":"b1","ts":1712345678.0,"version":"1.1","payload":{"browse_id":null,"directory_ref":null}}"#.into(),
        r#"{"id":"b1","ts":1712345678.01,"version":"1.1","pending_capacity":4,"type":"DIRECTORY_LIST_RESPONSE",
 "payload":{"browse_id":"Zq3V0p1s2Y8r…(32 chars)","current":null,"parent_ref":null,
  "entries":[{"directory_ref":"k9X…(32 chars)","name":"alice","path":"/home/alice"},
             {"directory_ref":"Pw2…(32 chars)","name":"USBDISK","path":"/media/alice/USBDISK"}],
  "next_cursor":null,"truncated":false,"expires_at":1712345978.0}}"#.into(),
        r#"{"type":"DIRECTORY_LIST_REQUEST","id":"b3","ts":1712345690.0,"payload":{"browse_id":"Zq3V…","directory_ref":"k9X…","cursor":"cR7…"}}"#.into(),
        r#"{"type":"DIRECTORY_LIST_RESPONSE","id":"b3","ts":1712345690.02,"version":"1.1","pending_capacity":4,
 "payload":{"browse_id":"Zq3V…","current":{"directory_ref":"k9X…","name":"alice","path":"/home/alice"},
  "parent_ref":null,"entries":[{"directory_ref":"T0a…","name":"zeta","path":"/home/alice/zeta"}],
  "next_cursor":null,"truncated":false,"expires_at":1712345978.0}}"#.into(),
        // §5, §8, §9, §11
        r#"{"type":"ATTACH_SESSION","id":"a1","ts":1712345700.0,"version":"1.1","payload":{"session_id":"session-1","browse_id":"Zq3V…","directory_ref":"T0a…","expected_connection_id":"conn-17"}}"#.into(),
        r#"{"type":"ACTIVATE_SESSION","id":"c1","ts":1712345710.0,"version":"1.1","payload":{"session_id":"session-1","revision":1}}"#.into(),
        r#"{"type":"RESTORE_SESSION","id":"r1","ts":1712349000.0,"version":"1.1","payload":{"session_id":"session-1","root_grant":"v1.eyJhbGxvd2VkX3Jvb3Qi….-qBOIFAc…"}}"#.into(),
        r#"{"type":"DETACH_SESSION","id":"x9","ts":1712349500.0,"version":"1.1","payload":{"session_id":"session-1"}}"#.into(),
        r#"{"type":"ACK","id":"x9","ts":1712349500.01,"version":"1.1","pending_capacity":4,"payload":{"ok":true}}"#.into(),
    ];
    // The fingerprint is elided in the specification ("568a8199…f62f57").
    for example in [
        r#"{"type":"SESSION_ATTACHED","id":"a1","ts":1712345700.05,"version":"1.1","pending_capacity":4,"payload":{"session_id":"session-1","allowed_root":"/home/alice/zeta","fingerprint":"568a8199…f62f57","revision":1,"root_grant":"v1.eyJhbGxvd2VkX3Jvb3Qi….-qBOIFAc…"}}"#,
        r#"{"type":"SESSION_ACTIVATED","id":"c1","ts":1712345710.03,"version":"1.1","pending_capacity":4,"payload":{"session_id":"session-1","allowed_root":"/home/alice/zeta","fingerprint":"568a8199…f62f57","revision":1}}"#,
        r#"{"type":"SESSION_RESTORED","id":"r1","ts":1712349000.04,"version":"1.1","pending_capacity":4,"payload":{"session_id":"session-1","allowed_root":"/home/alice/zeta","fingerprint":"568a8199…f62f57","revision":1,"root_grant":"v1.eyJhbGxvd2VkX3Jvb3Qi….-qBOIFAc…"}}"#,
    ] {
        out.push(example.replace("568a8199…f62f57", FINGERPRINT));
    }
    out
}

/// Every key the example states must come back with the same value; keys the
/// encoder adds (defaults written out) are allowed.
fn assert_contains(example: &Value, encoded: &Value, path: &str) {
    match (example, encoded) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let got = b
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} missing after encoding"));
                assert_contains(v, got, &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_contains(x, y, &format!("{path}[{i}]"));
            }
        }
        (a, b) => assert_eq!(a, b, "{path}"),
    }
}

#[test]
fn every_spec_example_decodes_and_encodes_back_to_the_same_message() {
    let examples = examples();
    assert_eq!(examples.len(), 38);
    for text in examples {
        let frame = protocol::decode(text.as_bytes())
            .unwrap_or_else(|e| panic!("example does not decode: {e}\n{text}"));
        let bytes = protocol::encode(&frame).expect("encodes");
        let again = protocol::decode(&bytes).expect("re-decodes");
        assert_eq!(again, frame, "{text}");

        let original: Value = serde_json::from_str(&text).expect("example is JSON");
        let encoded: Value = serde_json::from_str(&bytes).expect("output is JSON");
        assert_contains(&original, &encoded, "$");
    }
}

#[test]
fn encoded_frames_carry_all_six_envelope_keys_in_reference_order() {
    let frame = Frame::new("k1", 1.0004, Message::Pong(Default::default()));
    let text = protocol::encode(&frame).unwrap();
    assert_eq!(
        text,
        r#"{"id":"k1","ts":1.0004,"version":"1.1","pending_capacity":null,"type":"PONG","payload":{}}"#
    );
}

#[test]
fn optional_payload_fields_are_written_as_null_not_omitted() {
    let frame =
        protocol::decode(br#"{"type":"FILE_READ","id":"r","ts":1.0,"payload":{"path":"a"}}"#)
            .unwrap();
    let text = protocol::encode(&frame).unwrap();
    assert!(
        text.ends_with(
            r#""payload":{"path":"a","encoding":"utf-8","format":"text","offset":0,"length":null}}"#
        ),
        "{text}"
    );
    let missing = Frame::new(
        "s",
        2.5,
        Message::FileStatResponse(protocol::FileStatResponse::missing()),
    )
    .with_capacity(4);
    let text = protocol::encode(&missing).unwrap();
    assert_eq!(
        text,
        r#"{"id":"s","ts":2.5,"version":"1.1","pending_capacity":4,"type":"FILE_STAT_RESPONSE","payload":{"exists":false,"is_file":null,"is_dir":null,"is_symlink":null,"size_bytes":null,"mtime":null,"ctime":null,"mode":null,"owner_uid":null,"owner_gid":null,"mime_type":null,"path":null}}"#
    );
}

#[test]
fn payload_may_be_omitted_only_for_the_listed_types() {
    for ty in [
        "PING",
        "PONG",
        "CURSOR_POSITION_REQUEST",
        "DISPLAY_INFO_REQUEST",
        "WINDOW_LIST_REQUEST",
        "APP_LIST_REQUEST",
        "CLIPBOARD_READ",
    ] {
        let text = format!(r#"{{"type":"{ty}","id":"x","ts":1}}"#);
        let frame = protocol::decode(text.as_bytes()).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(frame.message_type().as_str(), ty);
    }
    let err = protocol::decode(br#"{"type":"FILE_STAT","id":"x","ts":1}"#).unwrap_err();
    assert_eq!(err.invalid, protocol::Invalid::MissingPayload);
}

#[test]
fn recording_requests_are_recognised_with_any_object_payload() {
    let frame = protocol::decode(
        br#"{"type":"START_RECORDING","id":"x","ts":1,"payload":{"anything":[1,{"goes":true}]}}"#,
    )
    .unwrap();
    assert_eq!(frame.message_type(), protocol::MessageType::StartRecording);
    let again = protocol::decode(protocol::encode(&frame).unwrap()).unwrap();
    assert_eq!(again, frame);
}

/// The message types the specification gives no example frame for, built
/// from their schemas (PROTOCOL.md Appendix B, §7.15): together with the
/// examples above, every one of the 60 types decodes and encodes back.
#[test]
fn every_message_type_round_trips() {
    use std::collections::BTreeSet;
    let payloads: &[(&str, &str)] = &[
        (
            "SCREENSHOT_REQUEST",
            r#"{"monitor":1,"quality":80,"region":[0,0,100,50],"window_id":"w1","format":"png","include_cursor":false}"#,
        ),
        (
            "SCREENSHOT_RESPONSE",
            r#"{"image_base64":"AAAA","mime_type":"image/png","width":100,"height":50,"monitor":1,"region":null,"display_scale":2.0,"logical_size":[50,25],"meta":{"origin":[10,20],"display_id":3}}"#,
        ),
        (
            "INPUT_ACTION",
            r#"{"action":"drag","coordinate":[1,2],"text":null,"key":null,"direction":"down","clicks":2,"button":"left","modifiers":["shift","super"],"scroll_amount":3,"scroll_direction":"left","duration_ms":250,"path":[[1,2],[3,4]],"paste":true,"preserve_clipboard":true}"#,
        ),
        ("CURSOR_POSITION_REQUEST", r#"{}"#),
        ("CURSOR_POSITION_RESPONSE", r#"{"x":5,"y":-6,"monitor":0}"#),
        ("DISPLAY_INFO_REQUEST", r#"{}"#),
        (
            "DISPLAY_INFO_RESPONSE",
            r#"{"monitors":[{"index":0,"primary":true,"physical_size":[3840,2160],"logical_size":[1920,1080],"scale":2.0,"origin":[0,0]}]}"#,
        ),
        (
            "WINDOW_LIST_REQUEST",
            r#"{"app_bundle_id":"org.example","include_minimized":true,"include_offscreen":false}"#,
        ),
        (
            "WINDOW_LIST_RESPONSE",
            r#"{"windows":[{"window_id":"w1","pid":42,"app_name":"Editor","app_bundle_id":null,"title":"notes — é","bounds":[0,0,800,600],"monitor":0,"is_focused":true,"is_minimized":false,"is_fullscreen":false}],"truncated":false}"#,
        ),
        ("WINDOW_FOCUS", r#"{"window_id":"w1","raise":false}"#),
        ("APP_LIST_REQUEST", r#"{"include_background":true}"#),
        (
            "APP_LIST_RESPONSE",
            r#"{"apps":[{"pid":42,"name":"Editor","bundle_id":null,"executable_path":"/usr/bin/editor","is_frontmost":true,"window_count":2}]}"#,
        ),
        (
            "APP_LAUNCH",
            r#"{"bundle_id":null,"executable_path":"/usr/bin/editor","args":["--new"],"activate":true}"#,
        ),
        ("CLIPBOARD_READ", r#"{"format":"image"}"#),
        (
            "CLIPBOARD_READ_RESPONSE",
            r#"{"format":"text","content":"hello","size_bytes":5}"#,
        ),
        ("CLIPBOARD_WRITE", r#"{"format":"text","content":"hello"}"#),
        (
            "PERMISSIONS_CHECK_REQUEST",
            r#"{"permissions":["screen_recording","accessibility"]}"#,
        ),
        (
            "PERMISSIONS_CHECK_RESPONSE",
            r#"{"permissions":{"accessibility":"granted","screen_recording":"not_applicable"}}"#,
        ),
        ("REQUEST_RECORDING_CONSENT", r#"{"anything":1}"#),
        ("RECORDING_CONSENT_RESULT", r#"{}"#),
        ("START_RECORDING", r#"{}"#),
        ("RECORDING_STARTED", r#"{}"#),
        ("STOP_RECORDING", r#"{}"#),
        ("RECORDING_SUMMARY", r#"{}"#),
        ("RECORDING_FETCH", r#"{}"#),
        ("RECORDING_DATA", r#"{}"#),
        ("APPLY_RECORDING_REVIEW", r#"{}"#),
        ("RECORDING_REVIEW_APPLIED", r#"{}"#),
        ("RECORDING_STEP", r#"{"step":{"n":1}}"#),
    ];
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for text in examples() {
        seen.insert(
            protocol::decode(text.as_bytes())
                .unwrap()
                .message_type()
                .as_str()
                .to_owned(),
        );
    }
    for (ty, payload) in payloads {
        let text = format!(r#"{{"type":"{ty}","id":"x","ts":1.5,"payload":{payload}}}"#);
        let frame = protocol::decode(text.as_bytes()).unwrap_or_else(|e| panic!("{ty}: {e}"));
        let bytes = protocol::encode(&frame).unwrap();
        assert_eq!(protocol::decode(&bytes).unwrap(), frame, "{ty}");
        let original: Value = serde_json::from_str(&text).unwrap();
        let encoded: Value = serde_json::from_str(&bytes).unwrap();
        assert_contains(&original, &encoded, ty);
        seen.insert(ty.to_string());
    }
    assert_eq!(seen.len(), 60, "types without a round trip: {seen:?}");
}
