#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The platform emulator's OAuth endpoints over TLS on its WebSocket port:
//! the authorize redirect with its checks, the code exchange with PKCE, the
//! rotation of refresh tokens, revocation, and the WebSocket accepting
//! exactly the access tokens it issued.

mod support;

use std::time::Duration;

use autogpt_shim_emulator::oauth::{CLIENT_ID, HttpResponse, form_encode, form_fields};
use autogpt_shim_emulator::{
    AttemptOutcome, Browser, Emulator, EmulatorOptions, Grants, OAuthEmulator,
};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use support::{connect, trusting};

const WAIT: Duration = Duration::from_secs(10);
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://localhost:41899/callback";

fn platform() -> (Emulator, Browser) {
    let emulator = Emulator::start(EmulatorOptions::new().require_issued_token()).unwrap();
    let browser = Browser::trusting(emulator.ca_pem().unwrap()).unwrap();
    (emulator, browser)
}

/// The authorize URL as the shim builds it, with `replace` overriding
/// (or, with an empty value, removing) parameters.
fn authorize_url(emulator: &Emulator, replace: &[(&str, &str)]) -> String {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT),
        ("scope", "USE_TOOLS"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", "af0ifjsldkj"),
    ];
    for (name, value) in replace {
        params.retain(|(n, _)| n != name);
        if !value.is_empty() {
            params.push((name, value));
        }
    }
    let query: Vec<String> = params
        .iter()
        .map(|(n, v)| format!("{n}={}", form_encode(v)))
        .collect();
    format!("{}?{}", emulator.authorize_url(), query.join("&"))
}

/// The query of a redirect `Location` as pairs.
fn redirect_params(response: &HttpResponse) -> Vec<(String, String)> {
    let location = response.header("location").unwrap();
    let (base, query) = location.split_once('?').unwrap();
    assert_eq!(base, REDIRECT);
    form_fields(query.as_bytes())
}

fn param(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// Approves an authorization request and returns the code.
fn code(emulator: &Emulator, browser: &Browser) -> String {
    let response = browser.get(&authorize_url(emulator, &[]), WAIT).unwrap();
    assert_eq!(response.status, 302, "{}", response.text());
    param(&redirect_params(&response), "code").unwrap()
}

fn post_form(browser: &Browser, url: &str, fields: &[(&str, &str)]) -> (u16, Value) {
    let body: Vec<String> = fields
        .iter()
        .map(|(n, v)| format!("{n}={}", form_encode(v)))
        .collect();
    let response = browser
        .request(
            "POST",
            url,
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body.join("&").as_bytes(),
            WAIT,
        )
        .unwrap();
    let json = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status, json)
}

fn exchange(emulator: &Emulator, browser: &Browser, code: &str, verifier: &str) -> (u16, Value) {
    post_form(
        browser,
        &emulator.token_url(),
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", CLIENT_ID),
            ("code_verifier", verifier),
        ],
    )
}

fn refresh(emulator: &Emulator, browser: &Browser, token: &str) -> (u16, Value) {
    post_form(
        browser,
        &emulator.token_url(),
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
            ("client_id", CLIENT_ID),
        ],
    )
}

fn revoke(emulator: &Emulator, browser: &Browser, token: &str, hint: &str) -> u16 {
    let body = serde_json::json!({
        "token": token, "token_type_hint": hint, "client_id": CLIENT_ID, "client_secret": ""
    });
    browser
        .request(
            "POST",
            &emulator.revoke_url(),
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
            WAIT,
        )
        .unwrap()
        .status
}

fn tokens(answer: &Value) -> (String, String) {
    (
        answer["access_token"].as_str().unwrap().to_owned(),
        answer["refresh_token"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn authorize_redirects_to_the_callback_with_a_code_and_the_state() {
    let (emulator, browser) = platform();
    let response = browser.get(&authorize_url(&emulator, &[]), WAIT).unwrap();
    assert_eq!(response.status, 302);
    assert_eq!(response.header("cache-control"), Some("no-store"));
    let params = redirect_params(&response);
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["code", "state"]);
    assert_eq!(param(&params, "state").unwrap(), "af0ifjsldkj");
    let code = param(&params, "code").unwrap();
    assert!(code.starts_with("ac-") && code.len() == 35, "{code}");
    // A page for a client that does not follow the redirect itself.
    assert!(response.text().contains("continue"));
    // Only the redirect: the browser is not sent anywhere else first.
    let other = browser.get(&authorize_url(&emulator, &[]), WAIT).unwrap();
    assert_ne!(param(&redirect_params(&other), "code").unwrap(), code);
    // OAuth requests are not upgrade attempts.
    assert!(emulator.attempts().is_empty());
    assert_eq!(emulator.oauth().requests().len(), 2);
}

#[test]
fn authorize_never_redirects_to_an_unregistered_uri_or_for_an_unknown_client() {
    let (emulator, browser) = platform();
    for replace in [
        ("client_id", "someone-else"),
        ("client_id", ""),
        ("redirect_uri", "http://evil.example/callback"),
        ("redirect_uri", "http://127.0.0.1:41899/callback"),
        ("redirect_uri", ""),
    ] {
        let response = browser
            .get(&authorize_url(&emulator, &[replace]), WAIT)
            .unwrap();
        assert_eq!(response.status, 400, "{replace:?}");
        assert_eq!(response.header("location"), None, "{replace:?}");
    }
}

#[test]
fn authorize_answers_a_bad_request_with_an_error_redirect() {
    let (emulator, browser) = platform();
    for (replace, error) in [
        (("code_challenge_method", "plain"), "invalid_request"),
        (("code_challenge_method", ""), "invalid_request"),
        (("code_challenge", "too-short"), "invalid_request"),
        (("code_challenge", ""), "invalid_request"),
        (("response_type", "token"), "unsupported_response_type"),
        (("scope", "local_executor:connect"), "invalid_scope"),
    ] {
        let response = browser
            .get(&authorize_url(&emulator, &[replace]), WAIT)
            .unwrap();
        assert_eq!(response.status, 302, "{replace:?}");
        let params = redirect_params(&response);
        assert_eq!(param(&params, "error").unwrap(), error, "{replace:?}");
        assert_eq!(param(&params, "state").unwrap(), "af0ifjsldkj");
        assert_eq!(param(&params, "code"), None, "{replace:?}");
    }
}

#[test]
fn a_code_is_exchanged_once_with_the_verifier_of_its_challenge() {
    let (emulator, browser) = platform();
    let first = code(&emulator, &browser);
    let wrong = URL_SAFE_NO_PAD.encode([7u8; 64]);
    let (status, answer) = exchange(&emulator, &browser, &first, &wrong);
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    // The failed attempt used the code up.
    let (status, _) = exchange(&emulator, &browser, &first, VERIFIER);
    assert_eq!(status, 400);

    let second = code(&emulator, &browser);
    let (status, answer) = exchange(&emulator, &browser, &second, VERIFIER);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["token_type"], "Bearer");
    assert_eq!(answer["scope"], "USE_TOOLS");
    let (access, refresh_token) = tokens(&answer);
    assert!(emulator.oauth().access_token_is_live(&access));
    assert_eq!(emulator.oauth().issued(), [(access, refresh_token)]);
    let (status, answer) = exchange(&emulator, &browser, &second, VERIFIER);
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );

    // A code the platform never issued, another redirect URI, another client.
    let (status, _) = exchange(&emulator, &browser, "ac-made-up", VERIFIER);
    assert_eq!(status, 400);
    let third = code(&emulator, &browser);
    let (status, answer) = post_form(
        &browser,
        &emulator.token_url(),
        &[
            ("grant_type", "authorization_code"),
            ("code", &third),
            ("redirect_uri", "http://localhost:41900/callback"),
            ("client_id", CLIENT_ID),
            ("code_verifier", VERIFIER),
        ],
    );
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let fourth = code(&emulator, &browser);
    let (status, answer) = post_form(
        &browser,
        &emulator.token_url(),
        &[
            ("grant_type", "authorization_code"),
            ("code", &fourth),
            ("redirect_uri", REDIRECT),
            ("client_id", "someone-else"),
            ("code_verifier", VERIFIER),
        ],
    );
    assert_eq!(
        (status, answer["error"].as_str()),
        (401, Some("invalid_client"))
    );
    let (status, answer) = post_form(
        &browser,
        &emulator.token_url(),
        &[("grant_type", "password"), ("client_id", CLIENT_ID)],
    );
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );
}

#[test]
fn refresh_tokens_rotate_and_revoking_one_ends_its_grant() {
    let (emulator, browser) = platform();
    let code = code(&emulator, &browser);
    let (_, answer) = exchange(&emulator, &browser, &code, VERIFIER);
    let (first_access, first_refresh) = tokens(&answer);
    let (status, answer) = refresh(&emulator, &browser, &first_refresh);
    assert_eq!(status, 200, "{answer}");
    let (second_access, second_refresh) = tokens(&answer);
    assert_ne!(second_refresh, first_refresh);
    // The old refresh token was replaced.
    let (status, answer) = refresh(&emulator, &browser, &first_refresh);
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let oauth = emulator.oauth();
    assert!(oauth.access_token_is_live(&first_access));
    assert!(oauth.access_token_is_live(&second_access));

    // Revoking an access token ends that token alone.
    assert_eq!(
        revoke(&emulator, &browser, &first_access, "access_token"),
        200
    );
    assert!(!oauth.access_token_is_live(&first_access));
    assert!(oauth.access_token_is_live(&second_access));
    // Revoking the refresh token ends the whole grant.
    assert_eq!(
        revoke(&emulator, &browser, &second_refresh, "refresh_token"),
        200
    );
    assert!(!oauth.access_token_is_live(&second_access));
    assert_eq!(refresh(&emulator, &browser, &second_refresh).0, 400);
    // An unknown token is answered like a known one (RFC 7009 §2.2).
    assert_eq!(
        revoke(&emulator, &browser, "at-unknown", "access_token"),
        200
    );
}

#[test]
fn the_websocket_accepts_exactly_the_access_tokens_the_platform_issued() {
    let (emulator, browser) = platform();
    let tls = || Some(trusting(emulator.ca_file().unwrap()));
    let refused = connect(&emulator.ws_url(), tls(), Some("at-not-issued")).unwrap_err();
    assert!(
        matches!(refused, tungstenite::Error::Http(ref r) if r.status() == 401),
        "{refused:?}"
    );
    assert!(connect(&emulator.ws_url(), tls(), None).is_err());

    let code = code(&emulator, &browser);
    let (_, answer) = exchange(&emulator, &browser, &code, VERIFIER);
    let (access, refresh_token) = tokens(&answer);
    let _ws = connect(&emulator.ws_url(), tls(), Some(&access)).unwrap();
    let conn = emulator.accept(WAIT).unwrap();
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {access}").as_str())
    );
    conn.allow_violations();
    // The refresh token is not an access token.
    assert!(connect(&emulator.ws_url(), tls(), Some(&refresh_token)).is_err());
    assert_eq!(revoke(&emulator, &browser, &access, "access_token"), 200);
    assert!(connect(&emulator.ws_url(), tls(), Some(&access)).is_err());
    let outcomes: Vec<AttemptOutcome> = emulator
        .attempts()
        .into_iter()
        .map(|attempt| attempt.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            AttemptOutcome::Rejected(401),
            AttemptOutcome::Rejected(401),
            AttemptOutcome::Upgraded,
            AttemptOutcome::Rejected(401),
            AttemptOutcome::Rejected(401),
        ]
    );
}

#[test]
fn a_scripted_endpoint_honours_codes_it_never_issued_but_checks_those_it_did() {
    let scripted = OAuthEmulator::start().unwrap();
    assert_eq!(scripted.endpoints().grants(), Grants::Any);
    let browser = Browser::new();
    let post = |fields: &[(&str, &str)]| {
        let body: Vec<String> = fields
            .iter()
            .map(|(n, v)| format!("{n}={}", form_encode(v)))
            .collect();
        browser
            .request(
                "POST",
                &scripted.token_url(),
                &[],
                body.join("&").as_bytes(),
                WAIT,
            )
            .unwrap()
            .status
    };
    let made_up = [
        ("grant_type", "authorization_code"),
        ("code", "anything"),
        ("redirect_uri", REDIRECT),
        ("client_id", CLIENT_ID),
        ("code_verifier", "anything"),
    ];
    assert_eq!(post(&made_up), 200);
    let query: Vec<String> = [
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT),
        ("scope", "USE_TOOLS"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
    ]
    .iter()
    .map(|(n, v)| format!("{n}={}", form_encode(v)))
    .collect();
    let response = browser
        .get(
            &format!("{}?{}", scripted.authorize_url(), query.join("&")),
            WAIT,
        )
        .unwrap();
    let issued = param(&redirect_params(&response), "code").unwrap();
    let mut wrong = made_up;
    wrong[1] = ("code", &issued);
    assert_eq!(post(&wrong), 400, "an issued code is checked");

    let platform = OAuthEmulator::start_with(Grants::Issued).unwrap();
    let status = browser
        .request(
            "POST",
            &platform.token_url(),
            &[],
            b"grant_type=authorization_code&code=anything&client_id=autogpt-local-executor",
            WAIT,
        )
        .unwrap()
        .status;
    assert_eq!(status, 400);
}
