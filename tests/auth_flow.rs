//! `auth`, `revoke` and `status` end to end (AUTH.md, CLI.md §4.1, §4.3,
//! §4.4): the real binary against the OAuth emulator (a real HTTP server on
//! loopback), with the test playing the browser. Every test checks that the
//! tokens it issued, the authorization code and the verifier appear in no
//! output and no file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use autogpt_shim::auth::challenge;
use autogpt_shim::secrets::Tokens;
use autogpt_shim_emulator::oauth::{form_fields, json_members, visit};
use autogpt_shim_emulator::{OAuthEmulator, RevokeBehaviour, TokenBehaviour};
use serde_json::json;
use start_support::*;

const CODE: &str = "the-code-7c1d";

fn tokens(home: &Home) -> Tokens {
    home.store().tokens().unwrap()
}

/// Nothing secret in the outputs or in any file of the home.
fn assert_no_secrets(run: &AuthRun, home: &Home, oauth: &OAuthEmulator) {
    let output = run.shim.output();
    let files = home.all_text();
    let mut secrets = vec![CODE.to_owned()];
    for (access, refresh) in oauth.issued() {
        secrets.push(access);
        secrets.push(refresh);
    }
    for request in oauth.requests() {
        for (k, v) in form_fields(&request.body) {
            if k == "code_verifier" {
                secrets.push(v);
            }
        }
    }
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        assert!(!output.contains(secret.as_str()), "{secret} in the output");
        assert!(!files.contains(secret.as_str()), "{secret} in a file");
    }
}

#[test]
fn auth_stores_the_tokens_the_platform_issued() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let first = port_block();
    let mut run = AuthRun::start(&home, &oauth, first);
    let endpoint = format!("{}/auth/authorize?", oauth.base_url());
    assert!(run.url.starts_with(&endpoint), "{}", run.url);
    assert_eq!(run.param("response_type"), "code");
    assert_eq!(run.param("client_id"), "autogpt-local-executor");
    assert_eq!(run.param("scope"), "USE_TOOLS");
    assert_eq!(run.param("code_challenge_method"), "S256");
    assert_eq!(
        run.param("redirect_uri"),
        format!("http://localhost:{first}/callback")
    );
    // A stray request first: the flow keeps waiting.
    let redirect = run.param("redirect_uri");
    let favicon = redirect.replace("/callback", "/favicon.ico");
    assert_eq!(visit(&favicon, WAIT).unwrap().0, 404);
    let state = run.param("state");
    let (status, page) = run.callback(&format!("code={CODE}&state={state}"));
    assert_eq!(status, 200);
    assert!(!page.contains(CODE));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    assert!(run.shim.stdout.text().contains("Authentication succeeded"));

    let requests = oauth.requests();
    assert_eq!(requests.len(), 1);
    let fields = form_fields(&requests[0].body);
    let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "grant_type",
            "code",
            "redirect_uri",
            "client_id",
            "code_verifier"
        ]
    );
    assert_eq!(fields[0].1, "authorization_code");
    assert_eq!(fields[1].1, CODE);
    assert_eq!(fields[2].1, redirect);
    assert_eq!(fields[3].1, "autogpt-local-executor");
    assert_eq!(challenge(&fields[4].1), run.param("code_challenge"));
    assert_eq!(fields[4].1.len(), 86);

    let (access, refresh) = oauth.issued()[0].clone();
    let stored = tokens(&home);
    assert_eq!(stored.access.unwrap().expose(), access);
    assert_eq!(stored.refresh.unwrap().expose(), refresh);
    assert_no_secrets(&run, &home, &oauth);
}

#[test]
fn auth_falls_back_to_the_next_port_when_the_first_is_taken() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let first = port_block();
    let _taken = TcpListener::bind(("127.0.0.1", first)).unwrap();
    let mut run = AuthRun::start(&home, &oauth, first);
    assert_eq!(
        run.param("redirect_uri"),
        format!("http://localhost:{}/callback", first + 1)
    );
    let state = run.param("state");
    run.callback(&format!("code={CODE}&state={state}"));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
}

#[test]
fn auth_exits_75_when_no_callback_port_is_free() {
    let home = Home::without_tokens();
    let first = port_block();
    let _taken: Vec<TcpListener> = (first..first + 12)
        .map(|p| TcpListener::bind(("127.0.0.1", p)).unwrap())
        .collect();
    let out = home
        .command(&["--platform-url", "http://127.0.0.1:9", "auth"])
        .env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", first.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("ports {first}-{}", first + 11)),
        "{err}"
    );
}

#[test]
fn auth_refuses_a_wrong_state_and_a_denial_without_storing() {
    for (query, message) in [
        (
            "code=x&state=not-the-state".to_owned(),
            "state did not match",
        ),
        (String::new(), "state did not match"),
        (
            "error=access_denied&state={state}".to_owned(),
            "authorization denied (access_denied)",
        ),
        ("state={state}".to_owned(), "no authorization code received"),
    ] {
        let home = Home::without_tokens();
        let oauth = OAuthEmulator::start().unwrap();
        let mut run = AuthRun::start(&home, &oauth, port_block());
        let query = query.replace("{state}", &run.param("state"));
        let (status, _) = run.callback(&query);
        assert_eq!(status, 400, "{query}");
        assert_eq!(run.shim.wait(WAIT), 77, "{query}: {}", run.shim.output());
        assert!(
            run.shim.stderr.text().contains(message),
            "{query}: {}",
            run.shim.output()
        );
        assert!(oauth.requests().is_empty(), "no code exchange");
        let stored = tokens(&home);
        assert!(stored.access.is_none() && stored.refresh.is_none());
    }
}

#[test]
fn auth_maps_token_endpoint_failures_to_their_exit_codes() {
    for (behaviour, code) in [
        (
            TokenBehaviour::Status(400, r#"{"error":"invalid_grant"}"#.into()),
            77,
        ),
        (TokenBehaviour::Status(503, "down".into()), 69),
        (TokenBehaviour::Body("not json".into()), 76),
        (TokenBehaviour::IssueWithoutRefresh, 76),
        (TokenBehaviour::DropConnection, 69),
    ] {
        let home = Home::without_tokens();
        let oauth = OAuthEmulator::start().unwrap();
        let label = format!("{behaviour:?}");
        oauth.push_token(behaviour);
        let mut run = AuthRun::start(&home, &oauth, port_block());
        let state = run.param("state");
        run.callback(&format!("code={CODE}&state={state}"));
        assert_eq!(run.shim.wait(WAIT), code, "{label}: {}", run.shim.output());
        assert!(run.shim.stderr.text().contains("Authentication failed: "));
        let stored = tokens(&home);
        assert!(stored.access.is_none(), "{label}: nothing stored");
        assert_no_secrets(&run, &home, &oauth);
    }
}

#[test]
fn auth_gives_up_on_a_token_endpoint_that_does_not_answer() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Hang(Duration::from_secs(60)));
    let mut run = AuthRun::start(&home, &oauth, port_block());
    let state = run.param("state");
    // The browser's page waits for the exchange, so it is fetched aside.
    let url = format!("{}?code={CODE}&state={state}", run.param("redirect_uri"));
    let browser = std::thread::spawn(move || visit(&url, Duration::from_secs(60)));
    let started = std::time::Instant::now();
    assert_eq!(
        run.shim.wait(Duration::from_secs(45)),
        69,
        "{}",
        run.shim.output()
    );
    assert!(started.elapsed() >= Duration::from_secs(25));
    assert!(tokens(&home).access.is_none());
    let (status, page) = browser.join().unwrap().unwrap();
    assert_eq!(status, 500);
    assert!(
        page.contains("failed") && !page.contains("complete"),
        "{page}"
    );
}

#[test]
fn auth_reads_a_chunked_token_response() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Chunked);
    let mut run = AuthRun::start(&home, &oauth, port_block());
    let state = run.param("state");
    run.callback(&format!("code={CODE}&state={state}"));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    assert_eq!(tokens(&home).access.unwrap().expose(), oauth.issued()[0].0);
}

fn revoke(home: &Home, oauth: &OAuthEmulator) -> (i32, String, String) {
    let out = home
        .command(&["--platform-url", &oauth.base_url(), "revoke"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn revoke_revokes_both_tokens_then_deletes_them() {
    let home = Home::new();
    let oauth = OAuthEmulator::start().unwrap();
    let (code, stdout, stderr) = revoke(&home, &oauth);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let requests = oauth.requests();
    assert_eq!(requests.len(), 2);
    for (request, (token, hint)) in requests
        .iter()
        .zip([(ACCESS, "access_token"), (REFRESH, "refresh_token")])
    {
        assert_eq!(request.path, "/api/oauth/revoke");
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(
            json_members(&request.body).unwrap(),
            [
                ("token".to_owned(), json!(token)),
                ("token_type_hint".to_owned(), json!(hint)),
                ("client_id".to_owned(), json!("autogpt-local-executor")),
                ("client_secret".to_owned(), json!("")),
            ]
        );
    }
    let stored = tokens(&home);
    assert!(stored.access.is_none() && stored.refresh.is_none());
    assert!(stdout.contains("autogpt-shim auth"));
    for secret in [ACCESS, REFRESH] {
        assert!(!stdout.contains(secret) && !stderr.contains(secret));
    }
    // Nothing stored any more: no request, and no claim of success.
    let (code, stdout, _) = revoke(&home, &oauth);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("No stored tokens"), "{stdout}");
    assert_eq!(oauth.requests().len(), 2);
}

/// `revoke` where nothing is stored: it says so, sends nothing, exits 1
/// and does not claim to have revoked anything.
fn revoke_finds_nothing(home: &Home) {
    let oauth = OAuthEmulator::start().unwrap();
    let (code, stdout, stderr) = revoke(home, &oauth);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("No stored tokens in the encrypted file "))
        .unwrap_or_else(|| panic!("{stdout}{stderr}"));
    assert!(line.contains("nothing was revoked"), "{line}");
    assert!(line.contains("autogpt-shim auth"), "{line}");
    assert!(!stdout.contains("Tokens revoked"), "{stdout}");
    assert!(!stderr.contains("Tokens revoked"), "{stderr}");
    assert!(oauth.requests().is_empty());
}

#[test]
fn revoke_without_tokens_exits_nonzero() {
    // Never authorized: no tokens.enc at all, and revoke creates none.
    let home = Home::without_tokens();
    revoke_finds_nothing(&home);
    assert!(!home.secrets_dir().join("tokens.enc").exists());

    // A tokens.enc that holds no tokens (revoked before) stays as it was.
    let home = Home::new();
    home.store().clear_tokens().unwrap();
    let file = home.secrets_dir().join("tokens.enc");
    let before = std::fs::read(&file).unwrap();
    revoke_finds_nothing(&home);
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn revoke_keeps_the_tokens_when_the_platform_fails() {
    for (first, second) in [
        (RevokeBehaviour::Ok, RevokeBehaviour::Status(500)),
        (RevokeBehaviour::DropConnection, RevokeBehaviour::Ok),
        (RevokeBehaviour::Status(400), RevokeBehaviour::Ok),
    ] {
        let home = Home::new();
        let oauth = OAuthEmulator::start().unwrap();
        oauth.push_revoke(first);
        oauth.push_revoke(second);
        let (code, stdout, stderr) = revoke(&home, &oauth);
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stderr.contains("did not complete"), "{stderr}");
        assert!(stderr.contains("kept"), "{stderr}");
        let stored = tokens(&home);
        assert_eq!(stored.access.unwrap().expose(), ACCESS);
        assert_eq!(stored.refresh.unwrap().expose(), REFRESH);
        for secret in [ACCESS, REFRESH] {
            assert!(!stdout.contains(secret) && !stderr.contains(secret));
        }
    }
}

#[test]
fn status_reports_configuration_tokens_and_daemon_without_secrets() {
    let home = Home::new();
    let emulator = emulator();
    let status = |home: &Home| {
        let out = home.command(&["status"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = status(&home);
    assert!(text.contains("Daemon: not running"), "{text}");
    assert!(
        text.contains("Configured platform: wss://platform.autogpt.net"),
        "{text}"
    );
    assert!(text.contains("persistent machine control"), "{text}");
    assert!(
        text.contains("access token present, refresh token present"),
        "{text}"
    );
    assert!(
        text.contains("Autostart entry (linux): not installed")
            || text.contains("Autostart entry (wsl2): not installed"),
        "{text}"
    );
    assert!(text.contains("  enable: systemctl --user enable --now autogpt-shim.service"));
    assert!(text.contains("enable-linger"));
    assert!(!text.contains(ACCESS) && !text.contains(REFRESH));

    let mut shim = Shim::start(&home, &emulator, &[]);
    let (_conn, _) = connect(&emulator, autogpt_shim_emulator::HelloAck::new());
    let text = status(&home);
    assert!(text.contains("Daemon: running"), "{text}");
    shim.signal(rustix::process::Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0);

    home.store().clear_tokens().unwrap();
    let text = status(&home);
    assert!(
        text.contains("access token absent, refresh token absent"),
        "{text}"
    );
}

#[test]
fn callback_listener_gives_up_after_its_deadline() {
    use autogpt_shim::auth::{Callback, Listener, Pkce};
    let listener = Listener::bind(port_block()).unwrap();
    let pkce = Pkce::generate().unwrap();
    assert!(matches!(
        listener.wait(&pkce, Duration::from_millis(300)),
        Callback::TimedOut
    ));
}

#[test]
fn callback_listener_answers_other_methods_with_501_and_keeps_waiting() {
    use autogpt_shim::auth::{Callback, Listener, Pkce};
    use autogpt_shim_emulator::oauth::http_request;
    let listener = Listener::bind(port_block()).unwrap();
    let port = listener.port();
    let pkce = Pkce::generate().unwrap();
    let state = pkce.state().to_owned();
    let waiter = std::thread::spawn(move || listener.wait(&pkce, WAIT));
    let url = format!("http://127.0.0.1:{port}/callback?code=abc&state={state}");
    let posted = http_request("POST", &url, &[], b"", WAIT).unwrap();
    assert_eq!(posted.status, 501);
    assert_eq!(posted.header("cache-control"), Some("no-store"));
    assert_eq!(visit(&url, WAIT).unwrap().0, 200);
    match waiter.join().unwrap() {
        Callback::Code(code) => assert_eq!(code.as_str(), "abc"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn auth_opens_the_browser_with_the_url_alone_and_without_the_shims_secrets() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let record = home.path().join("opener.txt");
    let script = format!(
        "#!/bin/sh\n{{ echo \"args=$#\"; echo \"url=$1\"; env; }} > '{}'\n",
        record.display()
    );
    std::fs::write(bin.join("xdg-open"), script).unwrap();
    std::fs::set_permissions(bin.join("xdg-open"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = home.command(&["--platform-url", &oauth.base_url(), "auth"]);
    command
        .env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", port_block().to_string())
        .env("DISPLAY", ":99")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    assert!(eventually(WAIT, || std::fs::read_to_string(&record)
        .is_ok_and(|t| t.contains("url="))));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains("args=1\n"), "{text}");
    assert!(text.contains("url=http://127.0.0.1:"), "{text}");
    assert!(!text.contains("AUTOGPT_SHIM_"), "{text}");
    assert!(!text.contains(PASSPHRASE), "{text}");
    assert!(text.contains("DISPLAY=:99"), "{text}");
}

/// A local connection to the callback port that sends the start of a
/// request head, one byte every `every`, and never finishes it.
struct Trickler {
    stream: std::net::TcpStream,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Trickler {
    fn open(port: u16, every: Duration) -> Trickler {
        use std::io::Write;
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writer = stream.try_clone().unwrap();
        let flag = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            for byte in b"GET /callback?state=x HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                if flag.load(Ordering::SeqCst) || writer.write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        });
        Trickler { stream, stop }
    }

    /// Whether the other side has closed the connection, waiting up to
    /// `timeout` for it.
    fn closed_within(&self, timeout: Duration) -> bool {
        use std::io::Read;
        let deadline = std::time::Instant::now() + timeout;
        let mut reader = self.stream.try_clone().unwrap();
        let mut buf = [0u8; 64];
        while std::time::Instant::now() < deadline {
            reader
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            match reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

impl Drop for Trickler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn callback_port(run: &AuthRun) -> u16 {
    let redirect = run.param("redirect_uri");
    let authority = redirect
        .strip_prefix("http://localhost:")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    authority.parse().unwrap()
}

#[test]
fn auth_completes_the_real_callback_while_other_connections_trickle_or_idle() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let mut run = AuthRun::start(&home, &oauth, port_block());
    let port = callback_port(&run);
    let _trickler = Trickler::open(port, Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(100));
    let _idle = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let state = run.param("state");
    let started = std::time::Instant::now();
    let redirect = run.param("redirect_uri");
    let answer = visit(
        &format!("{redirect}?code={CODE}&state={state}"),
        Duration::from_secs(5),
    );
    assert_eq!(answer.map(|(status, _)| status).ok(), Some(200));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
    assert!(tokens(&home).access.is_some());
}

#[test]
fn auth_closes_a_connection_whose_request_head_takes_longer_than_ten_seconds() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let mut run = AuthRun::start(&home, &oauth, port_block());
    let started = std::time::Instant::now();
    let trickler = Trickler::open(callback_port(&run), Duration::from_millis(500));
    assert!(
        trickler.closed_within(Duration::from_secs(13)),
        "a connection sending a byte every 500 ms is still open after 13 s"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "closed after {:?}: {}",
        started.elapsed(),
        run.shim.output()
    );
    let state = run.param("state");
    run.callback(&format!("code={CODE}&state={state}"));
    assert_eq!(run.shim.wait(WAIT), 0, "{}", run.shim.output());
}

#[test]
fn callback_listener_ends_at_its_deadline_while_a_connection_trickles() {
    use autogpt_shim::auth::{Callback, Listener, Pkce};
    let listener = Listener::bind(port_block()).unwrap();
    let port = listener.port();
    let pkce = Pkce::generate().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let settled = listener.wait(&pkce, Duration::from_secs(1));
        let _ = sender.send((settled, started.elapsed()));
    });
    let _trickler = Trickler::open(port, Duration::from_millis(200));
    let (settled, took) = receiver
        .recv_timeout(Duration::from_secs(5))
        .expect("the listener is still waiting 4 s after its deadline");
    assert!(matches!(settled, Callback::TimedOut), "{settled:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[test]
fn auth_refuses_tokens_with_control_characters_and_stores_nothing() {
    for body in [
        r#"{"access_token":"at-1\r\nX-Injected: 1","refresh_token":"rt-1"}"#,
        r#"{"access_token":"at-1","refresh_token":"rt-\u0000"}"#,
        r#"{"access_token":"at-\u007f","refresh_token":"rt-1"}"#,
        r#"{"access_token":"at-\u001b[2J","refresh_token":"rt-1"}"#,
    ] {
        let home = Home::without_tokens();
        let oauth = OAuthEmulator::start().unwrap();
        oauth.push_token(TokenBehaviour::Body(body.into()));
        let mut run = AuthRun::start(&home, &oauth, port_block());
        let state = run.param("state");
        run.callback(&format!("code={CODE}&state={state}"));
        assert_eq!(run.shim.wait(WAIT), 76, "{body}: {}", run.shim.output());
        let err = run.shim.stderr.text();
        assert!(err.contains("control characters"), "{body}: {err}");
        let stored = tokens(&home);
        assert!(
            stored.access.is_none() && stored.refresh.is_none(),
            "{body}"
        );
    }
}
