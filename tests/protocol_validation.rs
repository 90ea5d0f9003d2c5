//! Inbound validation (PROTOCOL.md §2.3–§2.4): each rejection rule fires, with
//! the disposition the specification names — silent drop, or an `ERROR`
//! reply for an identifiable request.

use autogpt_shim::protocol::{
    self, DecodeError, ErrorCode, FieldProblem, Invalid, MAX_MESSAGE_ID_BYTES,
    MAX_WEBSOCKET_MESSAGE_BYTES, MessageType,
};

fn reject(text: &str) -> DecodeError {
    match protocol::decode(text.as_bytes()) {
        Ok(frame) => panic!("accepted: {frame:?}\n{text}"),
        Err(e) => e,
    }
}

fn assert_dropped(e: &DecodeError) {
    assert_eq!(e.reply, None, "expected a silent drop, got {e:?}");
}

fn assert_answered(e: &DecodeError, id: &str, code: ErrorCode) {
    let reply = e
        .reply
        .as_ref()
        .unwrap_or_else(|| panic!("no reply: {e:?}"));
    assert_eq!(reply.id, id);
    assert_eq!(reply.code, code);
}

fn payload_problem(e: &DecodeError) -> (&str, &FieldProblem) {
    match &e.invalid {
        Invalid::Payload(f) => (f.field.as_str(), &f.problem),
        other => panic!("not a payload error: {other:?}"),
    }
}

fn stat(payload: &str) -> String {
    format!(r#"{{"type":"FILE_STAT","id":"s1","ts":1.0,"payload":{payload}}}"#)
}

// ---- the six cases the acceptance list names ---------------------------------

#[test]
fn frame_one_byte_over_16_mib_is_dropped() {
    let mut bytes = stat(r#"{"path":"x"}"#).into_bytes();
    bytes.resize(MAX_WEBSOCKET_MESSAGE_BYTES + 1, b' ');
    let e = protocol::decode(&bytes).unwrap_err();
    assert_eq!(
        e.invalid,
        Invalid::TooLarge {
            len: MAX_WEBSOCKET_MESSAGE_BYTES + 1
        }
    );
    assert_dropped(&e);
    // Exactly 16 MiB (padded with insignificant whitespace) is fine.
    bytes.truncate(MAX_WEBSOCKET_MESSAGE_BYTES);
    assert!(protocol::decode(&bytes).is_ok());
}

#[test]
fn a_text_frame_skips_only_the_utf8_check() {
    // A text frame's UTF-8 was checked by the WebSocket codec; every other
    // rule still applies to it, the size limit first.
    let mut text = stat(r#"{"path":"x"}"#);
    assert_eq!(
        protocol::decode_text(&text).unwrap(),
        protocol::decode(text.as_bytes()).unwrap()
    );
    let duplicate = stat(r#"{"path":"a","path":"b"}"#);
    assert_eq!(
        protocol::decode_text(&duplicate).unwrap_err(),
        protocol::decode(duplicate.as_bytes()).unwrap_err()
    );
    text.push_str(&" ".repeat(MAX_WEBSOCKET_MESSAGE_BYTES + 1 - text.len()));
    let e = protocol::decode_text(&text).unwrap_err();
    assert_eq!(
        e.invalid,
        Invalid::TooLarge {
            len: MAX_WEBSOCKET_MESSAGE_BYTES + 1
        }
    );
    assert_dropped(&e);
}

#[test]
fn payload_nested_200_deep_is_dropped() {
    let nested = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let e = reject(&format!(
        r#"{{"type":"START_RECORDING","id":"x","ts":1,"payload":{{"a":{nested}}}}}"#
    ));
    assert_eq!(e.invalid, Invalid::TooDeep);
    assert_dropped(&e);
}

#[test]
fn invalid_utf8_is_dropped() {
    let mut bytes = stat(r#"{"path":"x"}"#).into_bytes();
    let at = bytes.iter().position(|&b| b == b'x').unwrap();
    bytes[at] = 0xff;
    let e = protocol::decode(&bytes).unwrap_err();
    assert_eq!(e.invalid, Invalid::NotUtf8);
    assert_dropped(&e);
}

#[test]
fn duplicate_key_is_dropped() {
    let e = reject(
        r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"payload":{"path":"a","path":"/etc/passwd"}}"#,
    );
    assert_eq!(e.invalid, Invalid::DuplicateKey("path".into()));
    assert_dropped(&e);
    let e = reject(r#"{"type":"FILE_STAT","type":"PING","id":"s1","ts":1.0,"payload":{}}"#);
    assert_eq!(e.invalid, Invalid::DuplicateKey("type".into()));
}

#[test]
fn unknown_payload_field_is_answered_with_internal_error_naming_it() {
    let e = reject(&stat(r#"{"path":"a","follow":true}"#));
    assert_eq!(payload_problem(&e), ("follow", &FieldProblem::Unknown));
    assert_answered(&e, "s1", ErrorCode::InternalError);
    assert!(e.to_string().contains("'follow'"), "{e}");
}

#[test]
fn unknown_envelope_field_is_answered_for_requests_and_dropped_otherwise() {
    let e = reject(r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"payload":{"path":"a"},"extra":1}"#);
    assert_eq!(e.invalid, Invalid::UnknownEnvelopeKey("extra".into()));
    assert_answered(&e, "s1", ErrorCode::InternalError);
    let e = reject(r#"{"type":"PING","id":"p","ts":1.0,"payload":{},"extra":1}"#);
    assert_dropped(&e);
}

#[test]
fn wrong_major_version_is_dropped_even_for_requests() {
    let e =
        reject(r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"version":"2.0","payload":{"path":"a"}}"#);
    assert_eq!(
        e.invalid,
        Invalid::WrongMajor {
            version: "2.0".into()
        }
    );
    assert_dropped(&e);
}

// ---- the rest of §2.3 ---------------------------------------------------------

#[test]
fn any_minor_and_unparseable_versions_are_tolerated() {
    for v in ["1.0", "1.4", "01.9", "v2.0", "2", "garbage"] {
        let text = format!(
            r#"{{"type":"FILE_STAT","id":"s1","ts":1.0,"version":"{v}","payload":{{"path":"a"}}}}"#
        );
        let frame = protocol::decode(text.as_bytes()).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(frame.version, v);
    }
    let frame = protocol::decode(stat(r#"{"path":"a"}"#).as_bytes()).unwrap();
    assert_eq!(frame.version, "1.1");
}

#[test]
fn null_version_is_rejected() {
    let e =
        reject(r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"version":null,"payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::VersionNotString);
    assert_answered(&e, "s1", ErrorCode::InternalError);
    let e =
        reject(r#"{"type":"FILE_STAT","id":"s1","ts":1.0,"version":1.1,"payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::VersionNotString);
}

#[test]
fn malformed_ids_are_dropped() {
    let e = reject(r#"{"type":"FILE_STAT","id":7,"ts":1.0,"payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::IdNotString);
    assert_dropped(&e);
    let e = reject(r#"{"type":"FILE_STAT","id":null,"ts":1.0,"payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::IdNotString);
    let e = reject(r#"{"type":"FILE_STAT","ts":1.0,"payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::MissingId);
    assert_dropped(&e);
    // Any string is an id, the empty one included.
    assert!(
        protocol::decode(br#"{"type":"FILE_STAT","id":"","ts":1,"payload":{"path":"a"}}"#).is_ok()
    );
}

#[test]
fn ids_longer_than_the_bound_are_dropped_even_for_a_request() {
    let frame =
        |id: &str| format!(r#"{{"type":"FILE_STAT","id":"{id}","ts":1,"payload":{{"path":"a"}}}}"#);
    let longest = "x".repeat(MAX_MESSAGE_ID_BYTES);
    assert_eq!(MAX_MESSAGE_ID_BYTES, 1024);
    assert!(protocol::decode(frame(&longest).as_bytes()).is_ok());
    // Counted in bytes: 342 three-byte characters are 1,026 bytes.
    for id in ["x".repeat(MAX_MESSAGE_ID_BYTES + 1), "€".repeat(342)] {
        let e = reject(&frame(&id));
        assert_eq!(e.invalid, Invalid::IdTooLong { len: id.len() });
        assert_dropped(&e);
    }
    // Also when the rest of the request is invalid: there is no id to answer.
    let e = reject(&format!(
        r#"{{"type":"FILE_STAT","id":"{}","ts":1,"payload":{{}}}}"#,
        "x".repeat(MAX_MESSAGE_ID_BYTES + 1)
    ));
    assert_dropped(&e);
}

#[test]
fn missing_or_unknown_type_is_dropped() {
    for (text, invalid) in [
        (r#"{"id":"x","ts":1,"payload":{}}"#, Invalid::MissingType),
        (
            r#"{"type":3,"id":"x","ts":1,"payload":{}}"#,
            Invalid::TypeNotString,
        ),
        (
            r#"{"type":"file_stat","id":"x","ts":1,"payload":{}}"#,
            Invalid::UnknownType("file_stat".into()),
        ),
    ] {
        let e = reject(text);
        assert_eq!(e.invalid, invalid);
        assert_dropped(&e);
    }
}

#[test]
fn not_json_or_not_an_object_is_dropped() {
    for text in [
        "",
        "not json",
        "[]",
        "\"FILE_STAT\"",
        "{} {}",
        r#"{"type":"PING","id":"\ud800","ts":1}"#,
    ] {
        let e = reject(text);
        assert!(
            matches!(e.invalid, Invalid::Syntax(_) | Invalid::NotAnObject),
            "{text:?}: {e:?}"
        );
        assert_dropped(&e);
    }
}

#[test]
fn ts_must_be_a_number() {
    let e = reject(r#"{"type":"FILE_STAT","id":"s1","ts":"1.0","payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::TsNotNumber);
    assert_answered(&e, "s1", ErrorCode::InternalError);
    let e = reject(r#"{"type":"FILE_STAT","id":"s1","payload":{"path":"a"}}"#);
    assert_eq!(e.invalid, Invalid::MissingTs);
    // Integers are numbers.
    assert!(protocol::decode(br#"{"type":"PING","id":"p","ts":1}"#).is_ok());
}

#[test]
fn pending_capacity_must_be_an_integer_or_null() {
    for ok in ["null", "0", "7", "-1"] {
        let text = format!(r#"{{"type":"PING","id":"p","ts":1,"pending_capacity":{ok}}}"#);
        assert!(protocol::decode(text.as_bytes()).is_ok(), "{ok}");
    }
    for bad in ["1.5", "\"3\"", "true", "3.0"] {
        let text = format!(r#"{{"type":"PING","id":"p","ts":1,"pending_capacity":{bad}}}"#);
        assert_eq!(
            reject(&text).invalid,
            Invalid::PendingCapacityInvalid,
            "{bad}"
        );
    }
}

#[test]
fn payload_must_be_an_object() {
    let e = reject(r#"{"type":"FILE_STAT","id":"s1","ts":1,"payload":null}"#);
    assert_eq!(e.invalid, Invalid::PayloadNotObject);
    assert_answered(&e, "s1", ErrorCode::InternalError);
    let e = reject(r#"{"type":"START_RECORDING","id":"r","ts":1,"payload":[]}"#);
    assert_eq!(e.invalid, Invalid::PayloadNotObject);
    assert_answered(&e, "r", ErrorCode::InternalError);
}

#[test]
fn ping_with_any_payload_key_is_dropped() {
    let e = reject(r#"{"type":"PING","id":"k1","ts":1.0,"payload":{"x":1}}"#);
    assert_eq!(payload_problem(&e), ("x", &FieldProblem::Unknown));
    assert_dropped(&e);
}

#[test]
fn only_natural_json_types_are_accepted() {
    let read = |p: &str| format!(r#"{{"type":"FILE_READ","id":"r1","ts":1,"payload":{p}}}"#);
    let e = reject(&read(r#"{"path":"a","offset":5.0}"#));
    assert_eq!(
        payload_problem(&e),
        (
            "offset",
            &FieldProblem::WrongType {
                expected: "an integer"
            }
        )
    );
    let e = reject(&read(r#"{"path":"a","offset":"5"}"#));
    assert_eq!(payload_problem(&e).0, "offset");
    let e = reject(&stat(r#"{"path":"a","follow_symlinks":"true"}"#));
    assert_eq!(payload_problem(&e).0, "follow_symlinks");
    let e = reject(&stat(r#"{"path":null}"#));
    assert_eq!(
        payload_problem(&e),
        (
            "path",
            &FieldProblem::WrongType {
                expected: "a string"
            }
        )
    );
    let e = reject(&stat(r#"{}"#));
    assert_eq!(payload_problem(&e), ("path", &FieldProblem::Missing));
    // A defaulted, non-nullable field refuses null.
    let e = reject(&read(r#"{"path":"a","encoding":null}"#));
    assert_eq!(payload_problem(&e).0, "encoding");
}

#[test]
fn unknown_enum_values_are_rejected() {
    let e = reject(
        r#"{"type":"FILE_READ","id":"r1","ts":1,"payload":{"path":"a","encoding":"UTF-8"}}"#,
    );
    assert!(matches!(
        payload_problem(&e),
        ("encoding", FieldProblem::UnknownValue { .. })
    ));
    assert_answered(&e, "r1", ErrorCode::InternalError);
    let e = reject(
        r#"{"type":"EXECUTE_COMMAND","id":"c","ts":1,"payload":{"command":"x","shell":"fish"}}"#,
    );
    assert_eq!(payload_problem(&e).0, "shell");
    let e = reject(
        r#"{"type":"LOCAL_LLM_COMPLETION","id":"q","ts":1,"payload":{"model":"m","messages":[{"role":"tool","content":"x"}]}}"#,
    );
    assert_eq!(payload_problem(&e).0, "messages[0].role");
}

#[test]
fn numeric_constraints_name_the_field() {
    let cases = [
        (
            r#"{"type":"EXECUTE_COMMAND","id":"c","ts":1,"payload":{"argv":["true"],"timeout_seconds":0}}"#,
            "timeout_seconds",
        ),
        (
            r#"{"type":"FILE_READ","id":"c","ts":1,"payload":{"path":"a","offset":-1}}"#,
            "offset",
        ),
        (
            r#"{"type":"FILE_READ","id":"c","ts":1,"payload":{"path":"a","length":0}}"#,
            "length",
        ),
        (
            r#"{"type":"ACTIVATE_SESSION","id":"c","ts":1,"payload":{"session_id":"s","revision":0}}"#,
            "revision",
        ),
        (
            r#"{"type":"ACTIVATE_SESSION","id":"c","ts":1,"payload":{"session_id":"s","revision":true}}"#,
            "revision",
        ),
    ];
    for (text, field) in cases {
        let e = reject(text);
        assert_eq!(payload_problem(&e).0, field, "{text}");
        assert_answered(&e, "c", ErrorCode::InternalError);
    }
}

#[test]
fn env_values_must_be_strings() {
    let e = reject(
        r#"{"type":"EXECUTE_COMMAND","id":"c","ts":1,"payload":{"command":"env","env":{"A":"1","B":2}}}"#,
    );
    assert_eq!(payload_problem(&e).0, "env.B");
}

#[test]
fn session_ids_must_match_the_pattern() {
    for bad in ["", "../control?admin=true", "-x", "a b"] {
        let text = format!(
            r#"{{"type":"DETACH_SESSION","id":"d","ts":1,"payload":{{"session_id":{}}}}}"#,
            serde_json::Value::String(bad.into())
        );
        let e = reject(&text);
        assert!(
            matches!(
                payload_problem(&e),
                ("session_id", FieldProblem::Constraint(_))
            ),
            "{bad:?}"
        );
        assert_answered(&e, "d", ErrorCode::InternalError);
    }
}

#[test]
fn hello_ack_limits_must_be_positive_and_session_id_not_empty() {
    let ack = |p: &str| {
        format!(
            r#"{{"type":"HELLO_ACK","id":"h","ts":1,"payload":{{"granted_capabilities":["files"]{p}}}}}"#
        )
    };
    for (extra, field) in [
        (r#","max_concurrent":0"#, "max_concurrent"),
        (
            r#","command_timeout_seconds":-5"#,
            "command_timeout_seconds",
        ),
        (r#","max_file_size_bytes":0"#, "max_file_size_bytes"),
        (r#","session_id":"""#, "session_id"),
    ] {
        let e = reject(&ack(extra));
        assert_eq!(payload_problem(&e).0, field);
        assert_dropped(&e);
    }
    let ok = protocol::decode(ack("").as_bytes()).unwrap();
    let protocol::Message::HelloAck(ack) = ok.message else {
        panic!("not an ack")
    };
    assert_eq!(ack.max_concurrent.get(), 4);
    assert_eq!(ack.command_timeout_seconds.get(), 30);
    assert_eq!(ack.max_file_size_bytes.get(), 10_485_760);
    assert_eq!(ack.protocol_version, "1.1");
    assert_eq!(ack.session_id, None);
}

#[test]
fn broken_reference_pair_is_answered_with_directory_reference_invalid() {
    let list =
        |p: &str| format!(r#"{{"type":"DIRECTORY_LIST_REQUEST","id":"b","ts":1,"payload":{p}}}"#);
    for payload in [
        r#"{"browse_id":"abc","directory_ref":null}"#,
        r#"{"browse_id":null,"directory_ref":"abc"}"#,
        r#"{"cursor":"c"}"#,
    ] {
        let e = reject(&list(payload));
        assert_answered(&e, "b", ErrorCode::DirectoryReferenceInvalid);
    }
    // Other schema failures of the same request are INTERNAL_ERROR.
    let e = reject(&list(r#"{"browse_id":"","directory_ref":"x"}"#));
    assert_answered(&e, "b", ErrorCode::InternalError);
    assert!(
        protocol::decode(list(r#"{"browse_id":"a","directory_ref":"b","cursor":"c"}"#).as_bytes())
            .is_ok()
    );
}

#[test]
fn error_frames_accept_any_code_string() {
    let frame = protocol::decode(
        br#"{"type":"ERROR","id":"e","ts":1,"payload":{"code":"SOMETHING_NEW","message":"m"}}"#,
    )
    .unwrap();
    let again = protocol::decode(protocol::encode(&frame).unwrap()).unwrap();
    assert_eq!(again, frame);
    assert_eq!(frame.message_type(), MessageType::Error);
}

#[test]
fn oversized_response_is_replaced_by_file_too_large_and_exact_limit_passes() {
    for encoding in [protocol::Encoding::Utf8, protocol::Encoding::Base64] {
        use protocol::{FileContents, Frame, Message};
        let make = |n: usize| {
            Frame::new(
                "r1",
                1.5,
                Message::FileContents(FileContents {
                    content: "a".repeat(n),
                    encoding,
                    size_bytes: n as u64,
                    truncated: false,
                }),
            )
            .with_capacity(3)
        };
        let overhead = protocol::encode(&make(0)).unwrap().len() - 1; // size_bytes "0" is one digit
        // Choose n so the frame is exactly 16 MiB (size_bytes has 8 digits).
        let n = MAX_WEBSOCKET_MESSAGE_BYTES - overhead - 8;
        let exact = protocol::encode_response(make(n)).unwrap();
        assert_eq!(exact.len(), MAX_WEBSOCKET_MESSAGE_BYTES);
        assert_eq!(exact.into_string().len(), MAX_WEBSOCKET_MESSAGE_BYTES);

        let over = protocol::encode_response(make(n + 1))
            .unwrap()
            .into_string();
        let frame = protocol::decode(&over).unwrap();
        assert_eq!(frame.id, "r1");
        assert_eq!(frame.pending_capacity, Some(3));
        let Message::Error(err) = frame.message else {
            panic!("not an error")
        };
        assert_eq!(err.code.as_str(), "FILE_TOO_LARGE");
        assert_eq!(err.message, protocol::OVERSIZE_MESSAGE);
    }
}

/// A large base64 `FILE_CONTENTS` is built around its content rather than
/// serialized through it; the text must be the same to the byte, whatever
/// the id holds that needs escaping.
#[test]
fn a_large_base64_file_contents_encodes_exactly_as_serializing_it_would() {
    use protocol::{FileContents, Frame, Message};
    let long_id = "\\\"".repeat(protocol::MAX_MESSAGE_ID_BYTES / 2);
    let ids = [
        "r1",
        "a\"quote\\and backslash",
        "ünï\u{1}\n\u{2028}",
        long_id.as_str(),
    ];
    for id in ids {
        for groups in [1, 16_383, 16_384, 16_385, 262_144] {
            for truncated in [false, true] {
                let content = "QUJD".repeat(groups) + "QQ==";
                let frame = Frame::new(
                    id,
                    1_700_000_000.25,
                    Message::FileContents(FileContents {
                        content,
                        encoding: protocol::Encoding::Base64,
                        size_bytes: groups as u64 * 3 + 1,
                        truncated,
                    }),
                )
                .with_capacity(7);
                let generic = protocol::encode(&frame).unwrap();
                let built = protocol::encode_response(frame).unwrap();
                // Large content is left in its own piece.
                let [_, content, _] = built.clone().into_pieces();
                assert_eq!(
                    content.is_empty(),
                    groups * 4 + 4 < 64 * 1024,
                    "{groups} groups"
                );
                assert!(built.into_string() == generic, "id {id:?}, {groups} groups");
            }
        }
    }
}

/// The shortcut trusts no label: content marked base64 that would need
/// escaping is serialized like any other string.
#[test]
fn large_content_marked_base64_that_needs_escaping_is_still_escaped() {
    use protocol::{FileContents, Frame, Message};
    for odd in ["\"", "\\", "\n", "\u{7f}", "é"] {
        let content = "QUJD".repeat(20_000) + odd;
        let frame = Frame::new(
            "r1",
            1.5,
            Message::FileContents(FileContents {
                content,
                encoding: protocol::Encoding::Base64,
                size_bytes: 60_000,
                truncated: false,
            }),
        );
        let generic = protocol::encode(&frame).unwrap();
        let built = protocol::encode_response(frame.clone())
            .unwrap()
            .into_string();
        assert!(built == generic, "{odd:?}");
        assert_eq!(protocol::decode(built).unwrap(), frame, "{odd:?}");
    }
}

/// A response's capacity is stamped again as it leaves: the text must be
/// what encoding it with the new capacity gives, whatever its id and
/// payload hold that looks like the member, and however many digits the
/// number gains or loses.
#[test]
fn restamping_a_response_gives_the_text_encoded_with_the_new_capacity() {
    use protocol::{FileContents, Frame, Message};
    let decoy = "x\",\"pending_capacity\":9,\"";
    let ids = [
        "r1",
        decoy,
        "\\\\\",\"pending_capacity\":1",
        "ends with a comma,",
    ];
    for id in ids {
        for (before, after) in [
            (7u64, 12u64),
            (12, 7),
            (0, 0),
            (3, 1_000_000),
            (1_000_000, 1_000_000),
            (10, 9),
            (9, 10),
        ] {
            for content in [decoy.to_owned(), "QUJD".repeat(20_000)] {
                let make = |capacity: u64| {
                    Frame::new(
                        id,
                        1.5,
                        Message::FileContents(FileContents {
                            content: content.clone(),
                            encoding: protocol::Encoding::Base64,
                            size_bytes: 3,
                            truncated: false,
                        }),
                    )
                    .with_capacity(capacity)
                };
                let mut text = protocol::encode_response(make(before)).unwrap();
                assert!(text.restamp_capacity(after));
                let expected = protocol::encode_response(make(after)).unwrap();
                assert!(
                    text.into_string() == expected.into_string(),
                    "id {id:?}, {before} -> {after}"
                );
            }
        }
    }
}

/// A frame at the 16 MiB cap keeps its capacity rather than grow past it.
#[test]
fn a_frame_at_the_cap_is_not_restamped_past_it() {
    use protocol::{Frame, Message};
    let make = |content: String| {
        Frame::new(
            "r1",
            1.5,
            Message::FileContents(protocol::FileContents {
                content,
                encoding: protocol::Encoding::Base64,
                size_bytes: 3,
                truncated: false,
            }),
        )
        .with_capacity(9)
    };
    let overhead = protocol::encode_response(make(String::new()))
        .unwrap()
        .len();
    let mut text = protocol::encode_response(make(
        "QUJD".repeat((MAX_WEBSOCKET_MESSAGE_BYTES - overhead) / 4),
    ))
    .unwrap();
    let padding = MAX_WEBSOCKET_MESSAGE_BYTES - text.len();
    if padding > 0 {
        text = protocol::encode_response(make(
            "QUJD".repeat((MAX_WEBSOCKET_MESSAGE_BYTES - overhead) / 4) + &"=".repeat(padding),
        ))
        .unwrap();
    }
    assert_eq!(text.len(), MAX_WEBSOCKET_MESSAGE_BYTES);
    let before = text.clone();
    assert!(!text.restamp_capacity(10));
    assert!(text == before);
    // The same number of digits still fits.
    assert!(text.restamp_capacity(8));
    assert_eq!(text.len(), MAX_WEBSOCKET_MESSAGE_BYTES);
    assert_eq!(text.into_string().len(), MAX_WEBSOCKET_MESSAGE_BYTES);
}

/// A frame without a capacity number is left as it is.
#[test]
fn a_frame_without_a_capacity_is_not_restamped() {
    use protocol::{Frame, Message};
    let frame = Frame::new("r1", 1.5, Message::Pong(Default::default()));
    let mut text = protocol::Encoded::from(protocol::encode(&frame).unwrap());
    let before = text.clone();
    assert!(!text.restamp_capacity(4));
    assert_eq!(text, before);
}
