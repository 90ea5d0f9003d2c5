#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The OAuth endpoint emulator over real sockets: issued tokens, recorded
//! bodies, queued behaviours, unknown paths, hangs and drops; and the
//! browser helper against small listeners written here.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use autogpt_shim_emulator::oauth::{
    HttpResponse, OAuthEmulator, RevokeBehaviour, TokenBehaviour, form_fields, http_request, visit,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

const CODE_EXCHANGE: &str = "grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA\
&redirect_uri=http%3A%2F%2Flocalhost%3A41899%2Fcallback&client_id=autogpt-local-executor\
&code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

const REFRESH: &str =
    "grant_type=refresh_token&refresh_token=rt-example&client_id=autogpt-local-executor";

const REVOKE: &str = r#"{"token": "at-example", "token_type_hint": "access_token", "client_id": "autogpt-local-executor", "client_secret": ""}"#;

fn post_form(oauth: &OAuthEmulator, body: &str) -> HttpResponse {
    http_request(
        "POST",
        &oauth.token_url(),
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
        WAIT,
    )
    .unwrap()
}

fn post_revoke(oauth: &OAuthEmulator, body: &str) -> std::io::Result<HttpResponse> {
    http_request(
        "POST",
        &oauth.revoke_url(),
        &[("Content-Type", "application/json")],
        body.as_bytes(),
        WAIT,
    )
}

fn json_of(response: &HttpResponse) -> Value {
    serde_json::from_slice(&response.body).unwrap()
}

fn is_token(token: &str, prefix: &str) -> bool {
    token.len() == prefix.len() + 32
        && token.starts_with(prefix)
        && token[prefix.len()..]
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// Sends `request` raw and reads until the server closes; returns what came
/// back and how long the close took.
fn raw_exchange(oauth: &OAuthEmulator, request: &[u8]) -> (Vec<u8>, Duration) {
    let mut tcp = TcpStream::connect(oauth.local_addr()).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let started = Instant::now();
    tcp.write_all(request).unwrap();
    let mut answer = Vec::new();
    // A reset after the answer still leaves what was read in `answer`.
    let _ = tcp.read_to_end(&mut answer);
    (answer, started.elapsed())
}

fn token_request(body: &str) -> Vec<u8> {
    format!(
        "POST /api/oauth/token HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn listens_on_loopback_and_names_its_urls() {
    let oauth = OAuthEmulator::start().unwrap();
    assert!(oauth.local_addr().ip().is_loopback());
    assert_eq!(
        oauth.base_url(),
        format!("http://127.0.0.1:{}", oauth.port())
    );
    assert_eq!(
        oauth.token_url(),
        format!("{}/api/oauth/token", oauth.base_url())
    );
    assert_eq!(
        oauth.revoke_url(),
        format!("{}/api/oauth/revoke", oauth.base_url())
    );
}

#[test]
fn issues_fresh_tokens_by_default() {
    let oauth = OAuthEmulator::start().unwrap();
    let first = post_form(&oauth, CODE_EXCHANGE);
    let second = post_form(&oauth, REFRESH);
    for response in [&first, &second] {
        assert_eq!(response.status, 200);
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(
            response.header("content-length"),
            Some(response.body.len().to_string().as_str())
        );
        let body = json_of(response);
        assert!(is_token(body["access_token"].as_str().unwrap(), "at-"));
        assert!(is_token(body["refresh_token"].as_str().unwrap(), "rt-"));
        assert_eq!(body["token_type"], "Bearer");
        assert_eq!(body["expires_in"], 3600);
        assert_eq!(body["scope"], "USE_TOOLS");
    }
    let (first, second) = (json_of(&first), json_of(&second));
    assert_ne!(first["access_token"], second["access_token"]);
    assert_ne!(first["refresh_token"], second["refresh_token"]);
    let issued = oauth.issued();
    assert_eq!(issued.len(), 2);
    for (pair, body) in issued.iter().zip([&first, &second]) {
        assert_eq!(pair.0, body["access_token"].as_str().unwrap());
        assert_eq!(pair.1, body["refresh_token"].as_str().unwrap());
    }
}

#[test]
fn records_every_request_with_its_body() {
    let oauth = OAuthEmulator::start().unwrap();
    post_form(&oauth, CODE_EXCHANGE);
    post_form(&oauth, REFRESH);
    post_revoke(&oauth, REVOKE).unwrap();
    let requests = oauth.wait_requests(3, WAIT);
    assert_eq!(requests.len(), 3);

    let exchange = &requests[0];
    assert_eq!(exchange.method, "POST");
    assert_eq!(exchange.path, "/api/oauth/token");
    assert_eq!(
        exchange.header("Content-Type"),
        Some("application/x-www-form-urlencoded")
    );
    assert!(
        exchange
            .headers
            .iter()
            .all(|(name, _)| *name == name.to_ascii_lowercase())
    );
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    };
    assert_eq!(
        form_fields(&exchange.body),
        pairs(&[
            ("grant_type", "authorization_code"),
            ("code", "SplxlOBeZQQYbYS6WxSbIA"),
            ("redirect_uri", "http://localhost:41899/callback"),
            ("client_id", "autogpt-local-executor"),
            (
                "code_verifier",
                "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
            ),
        ])
    );
    assert_eq!(
        requests[1].form(),
        pairs(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", "rt-example"),
            ("client_id", "autogpt-local-executor"),
        ])
    );

    let revoke = &requests[2];
    assert_eq!(revoke.path, "/api/oauth/revoke");
    assert_eq!(revoke.header("content-type"), Some("application/json"));
    assert_eq!(revoke.body, REVOKE.as_bytes());
    let members = revoke.json_members().unwrap();
    let names: Vec<&str> = members.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["token", "token_type_hint", "client_id", "client_secret"]
    );
    assert_eq!(members[3].1, json!(""));
    assert_eq!(revoke.json().unwrap()["token"], "at-example");
}

#[test]
fn follows_queued_token_behaviours_in_order_then_issues() {
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Status(
        400,
        r#"{"error":"invalid_grant"}"#.to_owned(),
    ));
    oauth.push_token(TokenBehaviour::Status(500, "upstream down".to_owned()));
    oauth.push_token(TokenBehaviour::Body("not json".to_owned()));
    oauth.push_token(TokenBehaviour::Body("{}".to_owned()));
    oauth.push_token(TokenBehaviour::IssueWithoutRefresh);

    let refused = post_form(&oauth, REFRESH);
    assert_eq!(refused.status, 400);
    assert_eq!(refused.header("content-type"), Some("application/json"));
    assert_eq!(json_of(&refused), json!({"error": "invalid_grant"}));

    let failed = post_form(&oauth, REFRESH);
    assert_eq!(failed.status, 500);
    assert_eq!(failed.text(), "upstream down");
    assert!(
        failed
            .header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );

    let garbage = post_form(&oauth, REFRESH);
    assert_eq!((garbage.status, garbage.text().as_str()), (200, "not json"));
    let empty = post_form(&oauth, REFRESH);
    assert_eq!((empty.status, empty.text().as_str()), (200, "{}"));

    let without = json_of(&post_form(&oauth, REFRESH));
    assert!(is_token(without["access_token"].as_str().unwrap(), "at-"));
    assert!(without.get("refresh_token").is_none());

    let issued_again = json_of(&post_form(&oauth, REFRESH));
    assert!(is_token(
        issued_again["refresh_token"].as_str().unwrap(),
        "rt-"
    ));

    let issued = oauth.issued();
    assert_eq!(issued.len(), 2);
    assert_eq!(issued[0].0, without["access_token"].as_str().unwrap());
    assert_eq!(issued[0].1, "");
    assert_eq!(issued[1].0, issued_again["access_token"].as_str().unwrap());
    assert_eq!(oauth.requests().len(), 6);
}

#[test]
fn chunked_answer_carries_issued_tokens() {
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Chunked);
    let (raw, _) = raw_exchange(&oauth, &token_request(REFRESH));
    let raw = String::from_utf8(raw).unwrap();
    let (head, chunks) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    assert!(!head.contains("Content-Length"), "{head}");
    assert!(chunks.ends_with("\r\n0\r\n\r\n"), "{chunks:?}");
    assert!(
        chunks.matches("\r\n").count() > 4,
        "one chunk only: {chunks:?}"
    );

    oauth.push_token(TokenBehaviour::Chunked);
    let decoded = post_form(&oauth, REFRESH);
    assert_eq!(decoded.status, 200);
    assert_eq!(decoded.header("transfer-encoding"), Some("chunked"));
    let body = json_of(&decoded);
    let issued = oauth.issued();
    assert_eq!(issued.len(), 2);
    assert_eq!(issued[1].0, body["access_token"].as_str().unwrap());
    assert_eq!(issued[1].1, body["refresh_token"].as_str().unwrap());
}

#[test]
fn follows_queued_revoke_behaviours_in_order_then_answers_ok() {
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_revoke(RevokeBehaviour::Ok);
    oauth.push_revoke(RevokeBehaviour::Status(503));
    oauth.push_revoke(RevokeBehaviour::DropConnection);

    let ok = post_revoke(&oauth, REVOKE).unwrap();
    assert_eq!((ok.status, ok.body.len()), (200, 0));
    assert_eq!(post_revoke(&oauth, REVOKE).unwrap().status, 503);
    let dropped = post_revoke(&oauth, REVOKE).unwrap_err();
    assert_eq!(
        dropped.kind(),
        std::io::ErrorKind::UnexpectedEof,
        "{dropped}"
    );
    assert_eq!(post_revoke(&oauth, REVOKE).unwrap().status, 200);
    assert_eq!(oauth.requests().len(), 4);
    assert!(oauth.issued().is_empty());
}

#[test]
fn other_paths_and_methods_get_404_without_using_the_queue() {
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::Status(
        401,
        r#"{"error":"invalid_client"}"#.to_owned(),
    ));
    let base = oauth.base_url();
    let get_token = http_request("GET", &oauth.token_url(), &[], &[], WAIT).unwrap();
    assert_eq!(get_token.status, 404);
    let elsewhere = http_request("POST", &format!("{base}/oauth/token"), &[], b"x=1", WAIT);
    assert_eq!(elsewhere.unwrap().status, 404);
    let with_query = http_request(
        "POST",
        &format!("{base}/api/oauth/token?x=1"),
        &[],
        &[],
        WAIT,
    );
    assert_eq!(with_query.unwrap().status, 404);
    assert_eq!(visit(&format!("{base}/"), WAIT).unwrap().0, 404);

    assert_eq!(post_form(&oauth, REFRESH).status, 401);
    let requests = oauth.requests();
    let seen: Vec<(&str, &str)> = requests
        .iter()
        .map(|request| (request.method.as_str(), request.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET", "/api/oauth/token"),
            ("POST", "/oauth/token"),
            ("POST", "/api/oauth/token?x=1"),
            ("GET", "/"),
            ("POST", "/api/oauth/token"),
        ]
    );
    assert_eq!(requests[1].body, b"x=1");
    assert!(oauth.issued().is_empty());
}

#[test]
fn hang_reads_the_request_then_closes_after_the_delay_without_an_answer() {
    let oauth = OAuthEmulator::start().unwrap();
    let delay = Duration::from_millis(400);
    oauth.push_token(TokenBehaviour::Hang(delay));
    oauth.push_revoke(RevokeBehaviour::Hang(delay));

    let (answer, took) = raw_exchange(&oauth, &token_request(REFRESH));
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert!(took >= delay, "{took:?}");
    assert!(took < WAIT, "{took:?}");
    assert_eq!(oauth.requests()[0].form()[1].1, "rt-example");

    // The request is recorded while the hang is still going on.
    let oauth_ref = &oauth;
    thread::scope(|scope| {
        let client = scope.spawn(|| post_revoke(oauth_ref, REVOKE));
        let during = oauth_ref.wait_requests(2, WAIT);
        assert_eq!(during.len(), 2);
        assert_eq!(during[1].path, "/api/oauth/revoke");
        let error = client.join().unwrap().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof, "{error}");
    });

    // A client timeout shorter than the hang is the client's to report.
    oauth.push_token(TokenBehaviour::Hang(Duration::from_secs(5)));
    let started = Instant::now();
    let timed_out = http_request(
        "POST",
        &oauth.token_url(),
        &[],
        REFRESH.as_bytes(),
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(
        timed_out.kind() == std::io::ErrorKind::TimedOut,
        "{timed_out}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(oauth.issued().is_empty());
}

#[test]
fn token_drop_connection_closes_without_an_answer() {
    let oauth = OAuthEmulator::start().unwrap();
    oauth.push_token(TokenBehaviour::DropConnection);
    let (answer, _) = raw_exchange(&oauth, &token_request(REFRESH));
    assert!(answer.is_empty());
    assert_eq!(oauth.requests().len(), 1);
    assert_eq!(post_form(&oauth, REFRESH).status, 200);
}

#[test]
fn dropping_the_emulator_ends_a_hang_and_stops_listening() {
    let oauth = OAuthEmulator::start().unwrap();
    let addr = oauth.local_addr();
    oauth.push_token(TokenBehaviour::Hang(Duration::from_secs(60)));
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    tcp.write_all(&token_request(REFRESH)).unwrap();
    oauth.wait_requests(1, WAIT);
    let started = Instant::now();
    drop(oauth);
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    assert!(answer.is_empty());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}

#[test]
fn wait_requests_returns_what_there_is_at_the_deadline() {
    let oauth = OAuthEmulator::start().unwrap();
    post_form(&oauth, REFRESH);
    let started = Instant::now();
    let requests = oauth.wait_requests(2, Duration::from_millis(200));
    assert_eq!(requests.len(), 1);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[test]
fn bounds_and_framing_of_requests() {
    let oauth = OAuthEmulator::start().unwrap();

    let too_long = b"POST /api/oauth/token HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n";
    let (answer, _) = raw_exchange(&oauth, too_long);
    assert!(answer.starts_with(b"HTTP/1.1 413 "));

    let mut huge_head = b"POST /api/oauth/token HTTP/1.1\r\nX-Filler: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 20 * 1024));
    huge_head.extend_from_slice(b"\r\n\r\n");
    let (answer, _) = raw_exchange(&oauth, &huge_head);
    assert!(answer.starts_with(b"HTTP/1.1 431 "));

    let smuggled = b"POST /api/oauth/token HTTP/1.1\r\nContent-Length: 3\r\n\
Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let (answer, _) = raw_exchange(&oauth, smuggled);
    assert!(answer.starts_with(b"HTTP/1.1 400 "));
    assert!(oauth.requests().is_empty());
    assert!(oauth.issued().is_empty());

    let chunked = b"POST /api/oauth/token HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
5\r\ngrant\r\nb;ext=1\r\n_type=refre\r\n8\r\nsh_token\r\n0\r\nX-Trailer: 1\r\n\r\n";
    let (answer, _) = raw_exchange(&oauth, chunked);
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
    assert_eq!(
        oauth.requests()[0].body,
        b"grant_type=refresh_token".to_vec()
    );

    let expecting = http_request(
        "POST",
        &oauth.token_url(),
        &[("Expect", "100-continue")],
        REFRESH.as_bytes(),
        WAIT,
    )
    .unwrap();
    assert_eq!(expecting.status, 200);
    assert_eq!(oauth.requests()[1].form()[1].1, "rt-example");
}

/// A one-shot listener: accepts one connection, reads the request head,
/// sends it back through the channel, and writes `answer` (then closes).
fn one_shot(answer: &'static [u8]) -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (head_tx, head_rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if tcp.read(&mut byte).unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        head_tx.send(String::from_utf8(head).unwrap()).unwrap();
        // Written in pieces, so the client meets an answer split across reads.
        for piece in answer.chunks(5) {
            tcp.write_all(piece).unwrap();
            tcp.flush().unwrap();
        }
        let _ = tcp.shutdown(Shutdown::Write);
    });
    (port, head_rx)
}

#[test]
fn visit_sends_a_browser_request_to_localhost_and_reads_the_page() {
    let (port, head) = one_shot(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 22\r\n\
Connection: close\r\n\r\n<p>You can close.</p>\nTRAILING GARBAGE",
    );
    let url = format!("http://localhost:{port}/callback?code=the-code&state=s%2B1#frag");
    let (status, body) = visit(&url, WAIT).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, "<p>You can close.</p>\n");

    let head = head.recv_timeout(WAIT).unwrap();
    let mut lines = head.split("\r\n");
    assert_eq!(
        lines.next(),
        Some("GET /callback?code=the-code&state=s%2B1 HTTP/1.1")
    );
    let headers: Vec<(String, String)> = lines
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(": ").unwrap();
            (name.to_ascii_lowercase(), value.to_owned())
        })
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(get("host"), Some(format!("localhost:{port}").as_str()));
    assert_eq!(get("connection"), Some("close"));
    assert!(get("user-agent").unwrap().starts_with("Mozilla/5.0"));
    assert!(get("accept").unwrap().starts_with("text/html"));
    assert_eq!(get("content-length"), None);
}

#[test]
fn visit_reads_chunked_and_close_delimited_pages_and_error_statuses() {
    let (port, _head) = one_shot(
        b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
6\r\nstate \r\nE;x=y\r\ndid not match.\r\n0\r\n\r\n",
    );
    let page = visit(&format!("http://127.0.0.1:{port}/callback?state=x"), WAIT).unwrap();
    assert_eq!(page, (400, "state did not match.".to_owned()));

    let (port, _head) =
        one_shot(b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n\r\nnot here");
    let page = visit(&format!("http://localhost:{port}/favicon.ico"), WAIT).unwrap();
    assert_eq!(page, (404, "not here".to_owned()));

    let (port, _head) = one_shot(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
    let cut = visit(&format!("http://localhost:{port}/callback"), WAIT).unwrap_err();
    assert_eq!(cut.kind(), std::io::ErrorKind::UnexpectedEof, "{cut}");
}

#[test]
fn visit_refuses_anything_but_loopback_http() {
    for url in [
        "https://localhost:41899/callback",
        "http://example.com:41899/callback",
        "http://192.0.2.1:41899/callback",
        "localhost:41899/callback",
    ] {
        let error = visit(url, WAIT).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{url}");
    }
}

#[test]
fn visit_times_out_against_a_silent_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = Instant::now();
    let error = visit(
        &format!("http://localhost:{port}/callback"),
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(error.kind() == std::io::ErrorKind::TimedOut, "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(listener);
}
