//! Tokens at connect (AUTH.md §7): the forced refresh after an HTTP 401,
//! through the platform emulator (WebSocket) and the OAuth emulator (token
//! endpoint), with the real binary; and the renewal rules in process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::sync::Arc;

use autogpt_shim::auth::{StoredCredentials, TokenEndpoint};
use autogpt_shim::daemon::{AuditSink, Credentials, Renewal};
use autogpt_shim::secrets::SecretString;
use autogpt_shim::transport::{Connector, ProxyConfig};
use autogpt_shim_emulator::oauth::form_fields;
use autogpt_shim_emulator::{
    AttemptOutcome, Emulator, EmulatorOptions, Ending, HelloAck, OAuthEmulator, TokenBehaviour,
    UpgradeBehaviour,
};
use rustix::process::Signal;
use start_support::*;
use zeroize::Zeroizing;

#[test]
fn a_401_refreshes_once_and_the_retry_carries_the_new_token() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let platform =
        Emulator::start(EmulatorOptions::new().upgrades([UpgradeBehaviour::Status(401)])).unwrap();
    let mut shim = start_split(&home, &oauth, &platform);
    let (conn, _) = connect(&platform, HelloAck::new().grant(["files"]));
    let (new_access, new_refresh) = oauth.issued()[0].clone();
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {new_access}").as_str())
    );
    let attempts = platform.attempts();
    assert_eq!(
        attempts[0].authorization.as_deref(),
        Some(format!("Bearer {ACCESS}").as_str())
    );
    let requests = oauth.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/api/oauth/token");
    assert_eq!(
        form_fields(&requests[0].body),
        [
            ("grant_type".to_owned(), "refresh_token".to_owned()),
            ("refresh_token".to_owned(), REFRESH.to_owned()),
            ("client_id".to_owned(), "autogpt-local-executor".to_owned()),
        ]
    );
    // Stored for the next start, refresh token included.
    let tokens = home.store().tokens().unwrap();
    assert_eq!(tokens.access.unwrap().expose(), new_access);
    assert_eq!(tokens.refresh.unwrap().expose(), new_refresh);
    let refreshed = home.wait_record("TOKEN_REFRESHED", WAIT);
    assert_eq!(refreshed["details"], serde_json::json!({}));
    assert_eq!(refreshed["session_id"], SESSION);

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert_eq!(home.verify().0, 0);
    let audit = std::fs::read_to_string(&home.audit).unwrap();
    for secret in [ACCESS, REFRESH, new_access.as_str(), new_refresh.as_str()] {
        assert!(!shim.output().contains(secret), "{secret} in the output");
        assert!(!audit.contains(secret), "{secret} in the audit log");
    }
}

#[test]
fn a_4401_close_reconnects_with_a_refreshed_token_and_revokes_nothing() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Body(
        r#"{"access_token":"at-renewed-after-4401","refresh_token":"rt-renewed-after-4401","token_type":"Bearer","expires_in":3600,"scope":"USE_TOOLS"}"#.into(),
    ));
    let platform = Emulator::start(EmulatorOptions::new().expect_token(ACCESS)).unwrap();
    let mut shim = start_split(&home, &oauth, &platform);
    let (first, _) = connect(&platform, HelloAck::new().grant(["files"]));
    settle(&first);

    // The access token expires: the platform closes with 4401 and takes
    // only the renewed token from now on.
    platform.set_expected_token(Some("at-renewed-after-4401"));
    first.expire_token().unwrap();
    assert!(
        matches!(
            first.wait_closed(WAIT),
            Some(Ending::ClosedByEmulator { code: 4401, .. })
        ),
        "{:?}",
        first.ending()
    );
    let (second, _) = connect(&platform, HelloAck::new().grant(["files"]));
    assert_eq!(second.authorization(), Some("Bearer at-renewed-after-4401"));
    settle(&second);
    let outcomes: Vec<AttemptOutcome> = platform
        .attempts()
        .into_iter()
        .map(|attempt| attempt.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            AttemptOutcome::Upgraded,
            AttemptOutcome::Rejected(401),
            AttemptOutcome::Upgraded
        ]
    );
    assert_eq!(oauth.requests().len(), 1, "one refresh");
    let tokens = home.store().tokens().unwrap();
    assert_eq!(tokens.access.unwrap().expose(), "at-renewed-after-4401");

    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    let ops = home.ops();
    assert!(!ops.iter().any(|op| op == "SESSION_REVOKED"), "{ops:?}");
    assert!(ops.iter().any(|op| op == "TOKEN_REFRESHED"), "{ops:?}");
    let disconnected = home.wait_record("WS_DISCONNECTED", WAIT);
    let reason = disconnected["details"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("ws_closed_4401"), "{reason}");
    assert_eq!(home.verify().0, 0);
}

#[test]
fn a_refresh_refused_by_the_token_endpoint_exits_77_and_keeps_the_tokens() {
    for status in [400, 401] {
        let home = Home::new();
        let oauth = OAuthEmulator::start().unwrap();
        oauth.push_token(TokenBehaviour::Status(
            status,
            r#"{"error":"invalid_grant"}"#.into(),
        ));
        let platform =
            Emulator::start(EmulatorOptions::new().upgrades([UpgradeBehaviour::Status(401)]))
                .unwrap();
        let mut shim = start_split(&home, &oauth, &platform);
        assert_eq!(shim.wait(WAIT), 77, "{status}: {}", shim.output());
        let err = shim.stderr.text();
        assert!(err.contains("Authentication failed: "), "{err}");
        assert!(err.contains("run autogpt-shim auth"), "{err}");
        assert_eq!(platform.attempts().len(), 1, "no retry without a new token");
        let tokens = home.store().tokens().unwrap();
        assert_eq!(tokens.access.unwrap().expose(), ACCESS);
        assert_eq!(home.ops().last().unwrap(), "SHIM_STOP");
    }
}

#[test]
fn a_transient_refresh_failure_keeps_the_tokens_and_backs_off() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Status(503, "busy".into()));
    oauth.push_token(TokenBehaviour::DropConnection);
    let platform = Emulator::start(EmulatorOptions::new().upgrades([
        UpgradeBehaviour::Status(401),
        UpgradeBehaviour::Status(401),
        UpgradeBehaviour::Status(401),
    ]))
    .unwrap();
    let mut shim = start_split(&home, &oauth, &platform);
    // 503, then a dropped connection, then a refresh that works.
    let (conn, _) = connect(&platform, HelloAck::new().grant(["files"]));
    assert_eq!(oauth.requests().len(), 3);
    let (new_access, _) = oauth.issued()[0].clone();
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {new_access}").as_str())
    );
    let disconnects: Vec<String> = home
        .records()
        .iter()
        .filter(|r| r["op"] == "WS_DISCONNECTED")
        .map(|r| r["details"]["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        disconnects,
        ["loop_error: http_401", "loop_error: http_401"]
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn a_401_on_the_retry_is_terminal() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let platform = Emulator::start(
        EmulatorOptions::new()
            .upgrades([UpgradeBehaviour::Status(401), UpgradeBehaviour::Status(401)]),
    )
    .unwrap();
    let mut shim = start_split(&home, &oauth, &platform);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    assert_eq!(platform.attempts().len(), 2);
    assert_eq!(oauth.requests().len(), 1);
}

/// A connector for loopback plain text.
fn endpoint(oauth: &OAuthEmulator) -> TokenEndpoint {
    TokenEndpoint {
        connector: Arc::new(Connector::new(None, &[], ProxyConfig::direct()).unwrap()),
        url: oauth.token_url(),
        client_id: "autogpt-local-executor".into(),
    }
}

fn audit_sink(dir: &std::path::Path) -> AuditSink {
    let (log, _thread) = autogpt_shim::audit::AuditLog::open(
        autogpt_shim::audit::WriterOptions::new(dir.join("audit.log"), "test"),
        autogpt_shim::audit::AuditKey::new(vec![1; 32]).unwrap(),
    )
    .unwrap();
    AuditSink::Log(log)
}

#[test]
fn a_token_rotated_in_the_store_is_used_without_the_token_endpoint() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let initial = SecretString::new(ACCESS.into());
    let credentials = StoredCredentials::new(home.store(), Some(&initial), endpoint(&oauth));
    home.store_tokens("rotated-access", REFRESH);
    let audit = audit_sink(home.path());
    let old = Zeroizing::new(ACCESS.to_owned());
    match credentials.renew(Some(&old), &audit) {
        Renewal::Retry(token) => assert_eq!(token.as_str(), "rotated-access"),
        other => panic!("{other:?}"),
    }
    assert!(oauth.requests().is_empty());
    assert_eq!(
        credentials
            .access_token()
            .unwrap()
            .as_deref()
            .map(String::as_str),
        Some("rotated-access")
    );
}

#[test]
fn two_connections_refused_at_once_share_one_refresh() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let initial = SecretString::new(ACCESS.into());
    let credentials = Arc::new(StoredCredentials::new(
        home.store(),
        Some(&initial),
        endpoint(&oauth),
    ));
    let audit = audit_sink(home.path());
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let credentials = Arc::clone(&credentials);
            let audit = audit.clone();
            std::thread::spawn(move || {
                let old = Zeroizing::new(ACCESS.to_owned());
                match credentials.renew(Some(&old), &audit) {
                    Renewal::Retry(token) => token.to_string(),
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    let tokens: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(oauth.requests().len(), 1, "one refresh for both");
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(tokens[0], oauth.issued()[0].0);
}

#[test]
fn no_refresh_token_stored_is_a_definitive_refusal() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    home.store().clear_tokens().unwrap();
    let credentials = StoredCredentials::new(
        home.store(),
        Some(&SecretString::new(ACCESS.into())),
        endpoint(&oauth),
    );
    let old = Zeroizing::new(ACCESS.to_owned());
    let audit = audit_sink(home.path());
    assert!(matches!(
        credentials.renew(Some(&old), &audit),
        Renewal::Definitive(_)
    ));
    assert!(oauth.requests().is_empty());
}

#[test]
fn a_refreshed_token_with_control_characters_is_a_transient_failure_and_is_not_stored() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Body(
        r#"{"access_token":"hostile-at\r\nX-Injected: 1","refresh_token":"rt-1"}"#.into(),
    ));
    let platform = Emulator::start(
        EmulatorOptions::new()
            .upgrades([UpgradeBehaviour::Status(401), UpgradeBehaviour::Status(401)]),
    )
    .unwrap();
    let mut shim = start_split(&home, &oauth, &platform);
    // The unusable answer is dropped; the next refresh works.
    let (conn, _) = connect(&platform, HelloAck::new().grant(["files"]));
    assert_eq!(oauth.requests().len(), 2);
    let (new_access, new_refresh) = oauth.issued()[0].clone();
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {new_access}").as_str())
    );
    for attempt in platform.attempts() {
        let sent = attempt.authorization.unwrap_or_default();
        assert!(!sent.contains("hostile-at"), "{sent:?}");
    }
    let tokens = home.store().tokens().unwrap();
    assert_eq!(tokens.access.unwrap().expose(), new_access);
    assert_eq!(tokens.refresh.unwrap().expose(), new_refresh);
    assert_eq!(
        home.records()
            .iter()
            .filter(|r| r["op"] == "TOKEN_REFRESHED")
            .count(),
        1
    );
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}
