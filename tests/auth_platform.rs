//! `auth` end to end against the platform emulator as a whole platform
//! (AUTH.md §1–§7, CLI.md §4.1): the real binary authorizes over TLS on
//! 127.0.0.1 — the test playing the browser on the authorize redirect, or
//! pasting the final address at the `--no-browser` prompt — and `start`
//! then connects with the token the emulator issued, which is the only
//! kind of token it accepts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::process::Stdio;
use std::time::Duration;

use autogpt_shim::secrets::Tokens;
use autogpt_shim_emulator::oauth::{Followed, form_fields};
use autogpt_shim_emulator::{
    AttemptOutcome, Browser, Emulator, EmulatorOptions, HelloAck, TokenBehaviour,
};
use rustix::process::Signal;
use start_support::*;

/// A platform that accepts only the access tokens it issued.
fn platform() -> (Emulator, Browser) {
    let emulator = Emulator::start(EmulatorOptions::new().require_issued_token()).unwrap();
    let browser = Browser::trusting(emulator.ca_pem().unwrap()).unwrap();
    (emulator, browser)
}

/// `autogpt-shim --platform-url … --ca-file … auth [extra]`.
fn auth(home: &Home, emulator: &Emulator, extra: &[&str], stdin: Stdio) -> AuthRun {
    let mut args = platform_args(emulator);
    args.push("auth".to_owned());
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    AuthRun::spawn(home, &args, port_block(), stdin)
}

fn tokens(home: &Home) -> Tokens {
    home.store().tokens().unwrap()
}

/// The value of `name` in the query of `url`.
fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    form_fields(query.as_bytes())
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The address the platform sends the browser back to, without following
/// it: what a user on another computer copies from the address bar.
fn final_address(browser: &Browser, run: &AuthRun) -> String {
    let answer = browser.get(&run.url, WAIT).unwrap();
    assert_eq!(answer.status, 302, "{}", answer.text());
    answer.header("location").unwrap().to_owned()
}

/// The stored tokens are the ones the emulator issued, and no output shows
/// them or the code.
fn assert_stored_as_issued(home: &Home, emulator: &Emulator, run: &AuthRun, code: &str) {
    let issued = emulator.oauth().issued();
    assert_eq!(issued.len(), 1);
    let (access, refresh) = &issued[0];
    let stored = tokens(home);
    assert_eq!(stored.access.unwrap().expose(), access);
    assert_eq!(stored.refresh.unwrap().expose(), refresh);
    let output = run.shim.output();
    for secret in [code, access.as_str(), refresh.as_str()] {
        assert!(
            !output.contains(secret),
            "{secret} in the output:\n{output}"
        );
    }
}

/// `start` in machine-control mode connects with the stored (issued)
/// token, shakes hands and stops cleanly.
fn start_connects_with_the_issued_token(home: &Home, emulator: &Emulator) {
    let access = emulator.oauth().issued()[0].0.clone();
    let mut shim = Shim::start_control(home, emulator, &[]);
    let conn = emulator
        .accept(WAIT)
        .unwrap_or_else(|| panic!("no connection: {}", shim.output()));
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {access}").as_str())
    );
    conn.expect_hello(WAIT);
    conn.send_hello_ack(&HelloAck::new()).unwrap();
    settle(&conn);
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn auth_completes_against_the_emulator_through_the_browser_and_start_connects() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &[], Stdio::null());
    assert!(
        run.url
            .starts_with(&format!("{}?", emulator.authorize_url())),
        "{}",
        run.url
    );
    let Followed {
        redirects,
        url,
        response,
    } = browser.follow(&run.url, WAIT).unwrap();
    assert_eq!(redirects.as_slice(), std::slice::from_ref(&url));
    assert!(url.starts_with(&format!("{}?", run.param("redirect_uri"))));
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(response.text().contains("Authorization complete"));
    // The page came after the tokens were stored.
    assert!(tokens(&home).access.is_some());
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());

    let stdout = run.shim.stdout.text();
    assert!(stdout.contains("Authentication succeeded"), "{stdout}");
    // No desktop in the test's environment: said plainly, with the way out.
    assert!(
        stdout.contains("No browser can be opened here: no graphical session"),
        "{stdout}"
    );
    let redirect = run.param("redirect_uri");
    let port = redirect
        .strip_prefix("http://localhost:")
        .and_then(|rest| rest.strip_suffix("/callback"))
        .unwrap();
    assert!(
        stdout.contains(&format!("ssh -L {port}:127.0.0.1:{port}")),
        "{stdout}"
    );
    assert!(stdout.contains("auth --no-browser"), "{stdout}");
    // Not a terminal: plain lines with the time left.
    let stderr = run.shim.stderr.text();
    assert!(
        stderr.contains("Waiting for the authorization: 5:00 left.\n"),
        "{stderr}"
    );
    assert!(!stderr.contains('\r'), "{stderr:?}");

    let code = query_param(&url, "code").unwrap();
    assert_stored_as_issued(&home, &emulator, &run, &code);
    start_connects_with_the_issued_token(&home, &emulator);
}

#[test]
fn auth_no_browser_completes_with_the_pasted_address_and_start_connects() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &["--no-browser"], Stdio::piped());
    let address = final_address(&browser, &run);
    // Something unusable first: said why, asked again.
    run.paste("not the address");
    run.paste(&format!("  {address}  "));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());

    let stdout = run.shim.stdout.text();
    assert!(stdout.contains("Authentication succeeded"), "{stdout}");
    assert!(
        stdout.contains("Copy the whole address from its address bar"),
        "{stdout}"
    );
    assert!(!stdout.contains("No browser can be opened"), "{stdout}");
    let stderr = run.shim.stderr.text();
    assert!(
        stderr.contains("Paste the address or the code (5:00 left)."),
        "{stderr}"
    );
    assert!(
        stderr.contains("Not usable: a code is one word"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("Paste the address or the code").count(), 2);

    let code = query_param(&address, "code").unwrap();
    assert_stored_as_issued(&home, &emulator, &run, &code);
    start_connects_with_the_issued_token(&home, &emulator);
}

#[test]
fn auth_no_browser_completes_with_the_pasted_code_alone() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &["--no-browser"], Stdio::piped());
    let code = query_param(&final_address(&browser, &run), "code").unwrap();
    run.paste(&code);
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    assert_stored_as_issued(&home, &emulator, &run, &code);
    start_connects_with_the_issued_token(&home, &emulator);
}

#[test]
fn auth_no_browser_refuses_a_pasted_address_with_another_state() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &["--no-browser"], Stdio::piped());
    let address = final_address(&browser, &run);
    let state = query_param(&address, "state").unwrap();
    let forged = address.replace(&state, "someone-elses-state");
    assert_ne!(forged, address);
    run.paste(&forged);
    assert_eq!(run.shim.wait(WAIT), 77, "{}", run.shim.output());
    let stderr = run.shim.stderr.text();
    assert!(
        stderr.contains("Authentication failed: state did not match"),
        "{stderr}"
    );
    let requests = emulator.oauth().requests();
    assert!(
        requests
            .iter()
            .all(|r| r.path.starts_with("/auth/authorize?")),
        "no code exchange: {requests:?}"
    );
    let stored = tokens(&home);
    assert!(stored.access.is_none() && stored.refresh.is_none());
}

#[test]
fn auth_no_browser_exits_75_when_standard_input_ends_without_a_paste() {
    let home = Home::without_tokens();
    let (emulator, _) = platform();
    let mut run = auth(&home, &emulator, &["--no-browser"], Stdio::null());
    assert_eq!(run.shim.wait(WAIT), 75, "{}", run.shim.output());
    assert!(
        run.shim
            .stderr
            .text()
            .contains("standard input ended before an address or code was pasted"),
        "{}",
        run.shim.output()
    );
    assert!(tokens(&home).access.is_none());
}

#[test]
fn the_browser_page_says_failed_when_the_token_endpoint_refuses_the_code() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    emulator.oauth().push_token(TokenBehaviour::Status(
        400,
        r#"{"error":"invalid_grant"}"#.to_owned(),
    ));
    let mut run = auth(&home, &emulator, &[], Stdio::null());
    let followed = browser.follow(&run.url, WAIT).unwrap();
    let page = followed.response.text();
    assert_eq!(followed.response.status, 500, "{page}");
    assert!(page.contains("Authorization failed"), "{page}");
    assert!(!page.contains("complete"), "{page}");
    assert_eq!(run.shim.wait(WAIT), 77, "{}", run.shim.output());
    let stderr = run.shim.stderr.text();
    assert!(
        stderr.contains("Authentication failed: the endpoint answered HTTP 400"),
        "{stderr}"
    );
    assert!(tokens(&home).access.is_none());
}

#[test]
fn the_browser_page_waits_for_the_token_exchange() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let delay = Duration::from_secs(2);
    emulator.oauth().push_token(TokenBehaviour::Hang(delay));
    let mut run = auth(&home, &emulator, &[], Stdio::null());
    let started = std::time::Instant::now();
    let followed = browser.follow(&run.url, WAIT).unwrap();
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
    assert_eq!(followed.response.status, 500);
    assert!(followed.response.text().contains("Authorization failed"));
    assert_eq!(run.shim.wait(WAIT), 69, "{}", run.shim.output());
}

#[test]
fn a_token_the_emulator_revoked_is_renewed_with_the_stored_refresh_token() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &[], Stdio::null());
    browser.follow(&run.url, WAIT).unwrap();
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    let (access, _) = emulator.oauth().issued()[0].clone();
    // The platform revokes the access token alone (it expired, say).
    let body = format!(
        r#"{{"token":"{access}","token_type_hint":"access_token","client_id":"autogpt-local-executor","client_secret":""}}"#
    );
    let revoked = browser
        .request("POST", &emulator.revoke_url(), &[], body.as_bytes(), WAIT)
        .unwrap();
    assert_eq!(revoked.status, 200);
    assert!(!emulator.oauth().access_token_is_live(&access));

    let mut shim = Shim::start_control(&home, &emulator, &[]);
    let conn = emulator
        .accept(WAIT)
        .unwrap_or_else(|| panic!("no connection: {}", shim.output()));
    let (renewed, _) = emulator.oauth().issued()[1].clone();
    assert_eq!(
        conn.authorization(),
        Some(format!("Bearer {renewed}").as_str())
    );
    let outcomes: Vec<AttemptOutcome> = emulator
        .attempts()
        .into_iter()
        .map(|attempt| attempt.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [AttemptOutcome::Rejected(401), AttemptOutcome::Upgraded]
    );
    assert_eq!(tokens(&home).access.unwrap().expose(), renewed);
    conn.expect_hello(WAIT);
    conn.send_hello_ack(&HelloAck::new()).unwrap();
    settle(&conn);
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn revoke_against_the_emulator_ends_the_grant_so_start_must_authorize_again() {
    let home = Home::without_tokens();
    let (emulator, browser) = platform();
    let mut run = auth(&home, &emulator, &[], Stdio::null());
    browser.follow(&run.url, WAIT).unwrap();
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    let (access, refresh) = emulator.oauth().issued()[0].clone();
    // Keep a copy of the tokens, revoke them, then put the copy back: the
    // platform must refuse both now.
    let mut args = platform_args(&emulator);
    args.push("revoke".to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = home.command(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!emulator.oauth().access_token_is_live(&access));
    home.store_tokens(&access, &refresh);

    let mut shim = Shim::start_control(&home, &emulator, &[]);
    assert_eq!(shim.wait(WAIT), 77, "{}", shim.output());
    assert!(
        shim.stderr.text().contains("run autogpt-shim auth"),
        "{}",
        shim.output()
    );
}
