//! Endpoint derivation (AUTH.md §1, PROTOCOL.md §1.1) and the URL scheme and
//! host rules of the AUTH.md §1 hardening note.
#![allow(clippy::unwrap_used)]

use autogpt_shim::config::{
    Endpoints, OAUTH_SCHEMES, PLATFORM_SCHEMES, UrlProblem, WS_SCHEMES, check_platform_url,
    http_ify, is_loopback_host, pct_encode, split_url, ws_ify,
};

// --- derivation vectors --------------------------------------------------------

#[test]
fn default_platform_url_derives_the_documented_endpoints() {
    let e = Endpoints::derive("wss://platform.autogpt.net", None, None);
    assert_eq!(e.authorize(), "https://platform.autogpt.net/auth/authorize");
    assert_eq!(e.token(), "https://platform.autogpt.net/api/oauth/token");
    assert_eq!(e.revoke(), "https://platform.autogpt.net/api/oauth/revoke");
    assert_eq!(e.ws_base(), "wss://platform.autogpt.net/ws/local-executor");
    assert_eq!(
        e.control_url(),
        "wss://platform.autogpt.net/ws/local-executor"
    );
}

#[test]
fn https_platform_url_gives_a_wss_websocket_base() {
    let e = Endpoints::derive("https://platform.example.com", None, None);
    assert_eq!(e.ws_base(), "wss://platform.example.com/ws/local-executor");
}

#[test]
fn http_localhost_platform_url_gives_a_ws_websocket_base() {
    let e = Endpoints::derive("http://localhost:8000", None, None);
    assert_eq!(e.ws_base(), "ws://localhost:8000/ws/local-executor");
}

#[test]
fn wss_platform_url_gives_https_oauth_endpoints() {
    let e = Endpoints::derive("wss://platform.example.com", None, None);
    assert_eq!(e.authorize(), "https://platform.example.com/auth/authorize");
    assert_eq!(e.token(), "https://platform.example.com/api/oauth/token");
}

#[test]
fn explicit_ws_url_wins_over_platform_url() {
    let e = Endpoints::derive(
        "https://platform.example.com",
        None,
        Some("wss://ws.example.com/custom"),
    );
    assert_eq!(e.ws_base(), "wss://ws.example.com/custom");
}

#[test]
fn oauth_override_changes_only_the_authorize_endpoint() {
    let e = Endpoints::derive(
        "https://platform.example.com",
        Some("https://login.example.com/oauth/"),
        None,
    );
    assert_eq!(e.authorize(), "https://login.example.com/oauth/authorize");
    assert_eq!(e.token(), "https://platform.example.com/api/oauth/token");
    assert_eq!(e.revoke(), "https://platform.example.com/api/oauth/revoke");
}

#[test]
fn trailing_slashes_are_removed_before_deriving() {
    let e = Endpoints::derive("https://platform.example.com///", None, None);
    assert_eq!(e.token(), "https://platform.example.com/api/oauth/token");
    assert_eq!(e.ws_base(), "wss://platform.example.com/ws/local-executor");
}

#[test]
fn explicit_ws_url_is_verbatim_but_connections_drop_its_trailing_slash() {
    let e = Endpoints::derive(
        "https://p.example.com",
        None,
        Some("wss://ws.example.com/x//"),
    );
    assert_eq!(e.ws_base(), "wss://ws.example.com/x//");
    assert_eq!(e.control_url(), "wss://ws.example.com/x");
    assert_eq!(e.session_url("s1"), "wss://ws.example.com/x/s1");
}

#[test]
fn session_url_percent_encodes_the_session_id() {
    let e = Endpoints::derive("wss://platform.autogpt.net", None, None);
    assert_eq!(
        e.session_url("session-1"),
        "wss://platform.autogpt.net/ws/local-executor/session-1"
    );
    assert_eq!(
        e.session_url("a:b"),
        "wss://platform.autogpt.net/ws/local-executor/a%3Ab"
    );
}

#[test]
fn scheme_mapping_only_touches_known_prefixes() {
    assert_eq!(http_ify("wss://a"), "https://a");
    assert_eq!(http_ify("ws://a"), "http://a");
    assert_eq!(http_ify("https://a"), "https://a");
    assert_eq!(http_ify("WSS://a"), "WSS://a");
    assert_eq!(ws_ify("https://a"), "wss://a");
    assert_eq!(ws_ify("http://a"), "ws://a");
    assert_eq!(ws_ify("wss://a"), "wss://a");
}

#[test]
fn pct_encoding_keeps_only_unreserved_bytes() {
    assert_eq!(pct_encode("AZaz09_.-~"), "AZaz09_.-~");
    assert_eq!(pct_encode("a/b c:d%e?f#"), "a%2Fb%20c%3Ad%25e%3Ff%23");
    assert_eq!(pct_encode("é"), "%C3%A9");
    assert_eq!(pct_encode("+\n"), "%2B%0A");
}

// --- scheme and host rules ------------------------------------------------------

#[test]
fn platform_url_accepts_the_four_schemes() {
    for url in [
        "https://platform.example.com",
        "wss://platform.example.com",
        "http://localhost",
        "ws://127.0.0.1:8000/x",
    ] {
        assert_eq!(check_platform_url(url, PLATFORM_SCHEMES), Ok(()), "{url}");
    }
}

#[test]
fn other_or_upper_case_schemes_are_refused() {
    for url in [
        "ftp://x.example.com",
        "HTTPS://x.example.com",
        "x.example.com",
        "https:/x",
    ] {
        assert!(
            matches!(
                check_platform_url(url, PLATFORM_SCHEMES),
                Err(UrlProblem::Scheme(_))
            ),
            "{url}"
        );
    }
    assert!(matches!(
        check_platform_url("https://x.example.com", WS_SCHEMES),
        Err(UrlProblem::Scheme(_))
    ));
    assert!(matches!(
        check_platform_url("wss://x.example.com", OAUTH_SCHEMES),
        Err(UrlProblem::Scheme(_))
    ));
}

#[test]
fn plain_text_is_allowed_only_to_loopback_hosts() {
    for url in [
        "http://localhost:8000",
        "http://LOCALHOST",
        "ws://127.0.0.1",
        "ws://127.255.0.9:9/x",
        "http://[::1]:8000/",
        "ws://[0:0:0:0:0:0:0:1]",
    ] {
        assert_eq!(check_platform_url(url, PLATFORM_SCHEMES), Ok(()), "{url}");
    }
    for url in [
        "http://platform.example.com",
        "ws://10.0.0.1",
        "ws://128.0.0.1",
        "http://localhost.",
        "http://localhost.example.com",
        "http://foo.localhost",
        "ws://[::2]",
        "ws://[::ffff:127.0.0.1]",
        "http://0.0.0.0",
    ] {
        assert_eq!(
            check_platform_url(url, PLATFORM_SCHEMES),
            Err(UrlProblem::PlainTextToRemoteHost),
            "{url}"
        );
    }
}

#[test]
fn userinfo_cannot_smuggle_a_loopback_host() {
    assert_eq!(
        check_platform_url("http://localhost@evil.example.com", PLATFORM_SCHEMES),
        Err(UrlProblem::Credentials)
    );
    assert_eq!(
        check_platform_url("http://evil.example.com@localhost", PLATFORM_SCHEMES),
        Err(UrlProblem::Credentials)
    );
}

#[test]
fn backslash_cannot_split_the_authority() {
    assert_eq!(
        check_platform_url("http://evil.example.com\\@localhost", PLATFORM_SCHEMES),
        Err(UrlProblem::BadCharacter)
    );
}

#[test]
fn whitespace_control_and_non_ascii_characters_are_refused() {
    for url in [
        "https://a.example.com/x y",
        "https://a.example.com\n",
        " https://a.example.com",
        "https://ä.example.com",
    ] {
        assert_eq!(
            check_platform_url(url, PLATFORM_SCHEMES),
            Err(UrlProblem::BadCharacter),
            "{url:?}"
        );
    }
}

#[test]
fn hosts_must_be_well_formed() {
    for url in [
        "https://",
        "https:///path",
        "https://?q",
        "https://[::1",
        "https://[::1]x",
        "https://[not-ipv6]",
        "https://%6c%6fcalhost",
        "https://a!b.example.com",
    ] {
        assert_eq!(
            check_platform_url(url, PLATFORM_SCHEMES),
            Err(UrlProblem::BadHost),
            "{url}"
        );
    }
}

#[test]
fn ports_must_be_decimal_and_in_range() {
    for url in [
        "https://a.example.com:",
        "https://a.example.com:0",
        "https://a.example.com:65536",
        "https://a.example.com:8o",
        "https://a.example.com:1:2",
        "https://[::1]:",
    ] {
        assert_eq!(
            check_platform_url(url, PLATFORM_SCHEMES),
            Err(UrlProblem::BadPort),
            "{url}"
        );
    }
}

#[test]
fn split_url_extracts_scheme_host_and_port() {
    let parts = split_url("wss://[::1]:8443/ws?x#y", PLATFORM_SCHEMES).unwrap();
    assert_eq!(
        (parts.scheme, parts.host, parts.port),
        ("wss", "::1", Some(8443))
    );
    let parts = split_url("https://Platform.Example.com", PLATFORM_SCHEMES).unwrap();
    assert_eq!((parts.host, parts.port), ("Platform.Example.com", None));
    let parts = split_url("http://localhost#frag@x", PLATFORM_SCHEMES).unwrap();
    assert_eq!(parts.host, "localhost");
}

#[test]
fn loopback_hosts_are_recognised_without_resolving() {
    assert!(is_loopback_host("localhost"));
    assert!(is_loopback_host("127.0.0.1"));
    assert!(is_loopback_host("127.1.2.3"));
    assert!(is_loopback_host("::1"));
    assert!(!is_loopback_host("127.0.0.1.nip.io"));
    assert!(!is_loopback_host("0177.0.0.1"));
    assert!(!is_loopback_host("2130706433"));
}

#[test]
fn url_problems_read_as_one_line() {
    let message = UrlProblem::PlainTextToRemoteHost.to_string();
    assert!(!message.contains('\n'));
    assert!(message.contains("localhost"));
}
