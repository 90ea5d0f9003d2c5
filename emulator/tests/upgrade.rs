#![allow(clippy::unwrap_used, clippy::expect_used)]

//! What happens before the WebSocket exists: TLS trust, the pin, HTTP
//! statuses per attempt, the bearer token, plain ws://.

mod support;

use std::sync::Arc;
use std::time::Duration;

use autogpt_shim_emulator::{
    AttemptOutcome, Emulator, EmulatorOptions, TlsVersions, UpgradeBehaviour,
};
use rustls::ClientConfig;
use support::{RecordingVerifier, WAIT, connect, provider, sha256_hex, spki_of, trusting};

fn http_status(result: Result<support::Client, tungstenite::Error>) -> u16 {
    match result {
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other:?}"),
        Ok(_) => panic!("expected an HTTP refusal, got an upgrade"),
    }
}

#[test]
fn queued_statuses_answer_the_attempts_in_order_then_the_upgrade_succeeds() {
    let emulator = Emulator::start(
        EmulatorOptions::new()
            .upgrades([UpgradeBehaviour::Status(401), UpgradeBehaviour::Status(403)]),
    )
    .unwrap();
    emulator.push_upgrades([UpgradeBehaviour::Status(500)]);
    let ca = emulator.ca_file().unwrap().to_path_buf();
    let url = emulator.data_url("s1");

    assert_eq!(
        http_status(connect(&url, Some(trusting(&ca)), Some("t1"))),
        401
    );
    assert_eq!(
        http_status(connect(&url, Some(trusting(&ca)), Some("t2"))),
        403
    );
    assert_eq!(http_status(connect(&url, Some(trusting(&ca)), None)), 500);
    let _ws = connect(&url, Some(trusting(&ca)), Some("t3")).unwrap();
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(conn.authorization(), Some("Bearer t3"));

    let attempts = emulator.wait_attempts(4, WAIT);
    let outcomes: Vec<&AttemptOutcome> = attempts.iter().map(|attempt| &attempt.outcome).collect();
    assert_eq!(
        outcomes,
        [
            &AttemptOutcome::Rejected(401),
            &AttemptOutcome::Rejected(403),
            &AttemptOutcome::Rejected(500),
            &AttemptOutcome::Upgraded,
        ]
    );
    let bearers: Vec<Option<&str>> = attempts
        .iter()
        .map(|attempt| attempt.authorization.as_deref())
        .collect();
    assert_eq!(
        bearers,
        [
            Some("Bearer t1"),
            Some("Bearer t2"),
            None,
            Some("Bearer t3")
        ]
    );
    for attempt in &attempts {
        assert_eq!(attempt.path.as_deref(), Some("/ws/local-executor/s1"));
        assert!(
            attempt
                .headers
                .iter()
                .any(|(name, value)| name == "upgrade" && value == "websocket")
        );
    }
}

#[test]
fn a_refusal_with_a_detail_answers_its_status_and_a_json_detail_body() {
    let detail = "Session is not bound to this machine";
    let emulator = Emulator::start(EmulatorOptions::new().upgrades([UpgradeBehaviour::Refuse {
        status: 403,
        detail: detail.into(),
    }]))
    .unwrap();
    let ca = emulator.ca_file().unwrap().to_path_buf();
    let refused = connect(&emulator.data_url("s1"), Some(trusting(&ca)), Some("t"));
    let Err(tungstenite::Error::Http(response)) = refused else {
        panic!("expected an HTTP refusal, got {refused:?}");
    };
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/json"
    );
    let body: serde_json::Value =
        serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
    assert_eq!(body, serde_json::json!({ "detail": detail }));
    let attempts = emulator.wait_attempts(1, WAIT);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Rejected(403));
}

#[test]
fn an_expected_token_refuses_other_bearers_with_401_and_can_change() {
    let emulator = Emulator::start(EmulatorOptions::new().expect_token("good")).unwrap();
    let tls = || Some(trusting(emulator.ca_file().unwrap()));
    let url = emulator.ws_url();
    assert_eq!(http_status(connect(&url, tls(), Some("bad"))), 401);
    assert_eq!(http_status(connect(&url, tls(), None)), 401);
    connect(&url, tls(), Some("good")).unwrap();

    // After a refresh the platform only knows the new token.
    emulator.set_expected_token(Some("rotated"));
    assert_eq!(http_status(connect(&url, tls(), Some("good"))), 401);
    connect(&url, tls(), Some("rotated")).unwrap();
    emulator.set_expected_token(None);
    connect(&url, tls(), None).unwrap();
}

#[test]
fn dropped_and_hung_upgrades_get_no_http_answer() {
    let emulator = Emulator::start(EmulatorOptions::new().upgrades([
        UpgradeBehaviour::DropConnection,
        UpgradeBehaviour::Hang(Duration::from_millis(300)),
    ]))
    .unwrap();
    let tls = || Some(trusting(emulator.ca_file().unwrap()));
    let url = emulator.ws_url();

    for _ in 0..2 {
        let started = std::time::Instant::now();
        match connect(&url, tls(), Some("t")) {
            Err(tungstenite::Error::Http(response)) => {
                panic!("an HTTP answer arrived: {}", response.status())
            }
            Err(_) => {}
            Ok(_) => panic!("the upgrade succeeded"),
        }
        assert!(started.elapsed() < WAIT);
    }
    let attempts = emulator.wait_attempts(2, WAIT);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Unanswered);
    assert_eq!(attempts[1].outcome, AttemptOutcome::Unanswered);
    assert_eq!(attempts[1].authorization.as_deref(), Some("Bearer t"));
    assert!(emulator.accept(Duration::from_millis(50)).is_none());
}

#[test]
fn a_client_that_does_not_trust_the_ca_fails_tls_before_sending_its_token() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let stranger = Emulator::start(EmulatorOptions::new()).unwrap();
    let wrong_ca = trusting(stranger.ca_file().unwrap());
    let error = connect(&emulator.ws_url(), Some(wrong_ca), Some("secret")).unwrap_err();
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");

    let attempts = emulator.wait_attempts(1, WAIT);
    let AttemptOutcome::TlsFailed(reason) = &attempts[0].outcome else {
        panic!("expected a TLS failure, got {:?}", attempts[0].outcome);
    };
    assert!(!reason.is_empty());
    assert_eq!(attempts[0].path, None);
    assert_eq!(attempts[0].authorization, None);
}

#[test]
fn the_pin_is_the_sha256_of_the_served_leaf_spki_and_differs_per_emulator() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let verifier = RecordingVerifier::new(emulator.ca_file().unwrap());
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    connect(&emulator.ws_url(), Some(Arc::new(config)), None).unwrap();

    let leaf = verifier.leaf.lock().unwrap().clone().unwrap();
    let pin = emulator.spki_sha256().unwrap();
    assert_eq!(sha256_hex(&spki_of(&leaf)), pin);
    assert_eq!(pin.len(), 64);
    assert!(
        pin.bytes()
            .all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_uppercase())
    );

    let other = Emulator::start(EmulatorOptions::new()).unwrap();
    assert_ne!(other.spki_sha256(), Some(pin));
}

#[test]
fn the_ca_file_holds_one_pem_certificate_and_is_removed_with_the_emulator() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let path = emulator.ca_file().unwrap().to_path_buf();
    let pem = std::fs::read_to_string(&path).unwrap();
    assert_eq!(Some(pem.as_str()), emulator.ca_pem());
    assert_eq!(pem.matches("-----BEGIN CERTIFICATE-----").count(), 1);
    assert!(!pem.contains("PRIVATE KEY"));
    drop(emulator);
    assert!(!path.exists());
    assert!(!path.parent().unwrap().exists());
}

#[test]
fn a_chosen_ca_file_path_is_written_and_left_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emulator-ca.pem");
    let emulator = Emulator::start(EmulatorOptions::new().ca_file(&path)).unwrap();
    assert_eq!(emulator.ca_file(), Some(path.as_path()));
    connect(&emulator.ws_url(), Some(trusting(&path)), None).unwrap();
    drop(emulator);
    assert!(path.exists());
}

#[test]
fn tls_versions_can_be_restricted() {
    for (versions, expected) in [
        (TlsVersions::Tls12Only, rustls::ProtocolVersion::TLSv1_2),
        (TlsVersions::Tls13Only, rustls::ProtocolVersion::TLSv1_3),
        (TlsVersions::Both, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let emulator = Emulator::start(EmulatorOptions::new().tls_versions(versions)).unwrap();
        let ws = connect(
            &emulator.ws_url(),
            Some(trusting(emulator.ca_file().unwrap())),
            None,
        )
        .unwrap();
        let negotiated = ws.get_ref().tls().unwrap().protocol_version();
        assert_eq!(negotiated, Some(expected), "{versions:?}");
    }
}

#[test]
fn plain_mode_speaks_ws_on_loopback_without_any_pki() {
    let emulator = Emulator::start(EmulatorOptions::new().plain()).unwrap();
    assert!(!emulator.is_tls());
    assert_eq!(emulator.ca_file(), None);
    assert_eq!(emulator.spki_sha256(), None);
    let url = emulator.ws_url();
    assert_eq!(
        url,
        format!("ws://127.0.0.1:{}/ws/local-executor", emulator.port())
    );
    assert_eq!(
        emulator.platform_url(),
        format!("http://127.0.0.1:{}", emulator.port())
    );
    connect(&url, None, Some("t")).unwrap();
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(conn.authorization(), Some("Bearer t"));
    assert!(conn.peer_addr().ip().is_loopback());
}

#[test]
fn urls_follow_the_specification() {
    let emulator = Emulator::start(EmulatorOptions::new()).unwrap();
    let port = emulator.port();
    assert_eq!(emulator.local_addr().ip().to_string(), "127.0.0.1");
    assert_eq!(
        emulator.ws_url(),
        format!("wss://127.0.0.1:{port}/ws/local-executor")
    );
    assert_eq!(emulator.platform_url(), format!("https://127.0.0.1:{port}"));
    assert_eq!(
        emulator.data_url("a b/c"),
        format!("wss://127.0.0.1:{port}/ws/local-executor/a%20b%2Fc")
    );
}
