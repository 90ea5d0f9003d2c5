//! The live proof of `doctor`: the connection `start` would open, step by
//! step, over the daemon's own transport code ([`Connector`]): the endpoint
//! and its trust settings, name resolution, TCP (and a proxy's tunnel),
//! TLS with the configured CA file and SPKI pins, and the WebSocket
//! upgrade with the stored access token.
//!
//! Each step has its line: the first step that fails says why and what to
//! do, and the steps it prevented are shown as skipped. The whole opening
//! is bounded by the connector's opening timeout (10 s), the close after
//! it by [`CLOSE_WAIT`]. After the `101` the only frame sent is the close
//! (1000): no `HELLO`, no operation. Without a stored access token no
//! upgrade is asked for; the steps up to TLS are still proven. Text from the
//! network reaches a line only through the transport's escaped messages.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::Check;
use crate::config::{Config, Mode};
use crate::transport::{Connector, Incoming, Step, TransportError, WsUrl};

/// How long the close handshake after the upgrade may take.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The close reason sent after the upgrade.
const CLOSE_REASON: &str = "doctor: connection check";

/// The steps, in order, each with its line's label.
const LABELS: [&str; 4] = ["dns", "tcp", "tls", "upgrade"];

/// The connection checks, in order: `endpoint`, `dns`, `tcp`, `tls`,
/// `upgrade`. `env` is the process environment (for the proxy setting),
/// `token` the stored access token.
pub fn checks(
    config: &Config,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    token: Option<&Zeroizing<String>>,
) -> Vec<Check> {
    let url_text = match &config.mode {
        Mode::Legacy { session_id } => config.endpoints.session_url(session_id),
        Mode::Control => config.endpoints.control_url().to_owned(),
    };
    let prepared = Connector::from_config(config, env).and_then(|connector| {
        WsUrl::parse(&url_text)
            .map(|url| (connector, url))
            .map_err(TransportError::Url)
    });
    let (connector, url) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            let mut checks = vec![Check::fail(
                "endpoint",
                format!("{e}; fix the setting: start refuses to run with it"),
            )];
            checks.extend(skipped_from(0, "the endpoint is unusable"));
            return checks;
        }
    };
    let mut checks = vec![endpoint(config, &connector, &url, &url_text)];
    checks.extend(prove(&connector, &url, token));
    checks
}

/// What the checks below connect to, and with which trust settings.
fn endpoint(config: &Config, connector: &Connector, url: &WsUrl, text: &str) -> Check {
    let trust = match &config.tls_ca_file {
        Some(file) if url.is_secure() => format!(
            "web PKI roots and {}",
            crate::text::one_line(&file.display().to_string())
        ),
        _ if url.is_secure() => "web PKI roots".to_owned(),
        _ => "plain text to loopback".to_owned(),
    };
    let pins = match config.tls_pin_sha256.len() {
        0 => "no SPKI pin".to_owned(),
        n => format!("{n} SPKI pin(s)"),
    };
    let proxy = match connector.proxy_for_url(url) {
        Some(server) => format!("through the proxy {server}"),
        None => "no proxy".to_owned(),
    };
    let purpose = match &config.mode {
        Mode::Legacy { .. } => "legacy session connection",
        Mode::Control => "control connection",
    };
    Check::ok(
        "endpoint",
        format!(
            "{} ({purpose}; {trust}; {pins}; {proxy})",
            crate::text::one_line(text)
        ),
    )
}

/// Opens the connection as `start` does and turns what happened into one
/// line per step.
fn prove(connector: &Connector, url: &WsUrl, token: Option<&Zeroizing<String>>) -> Vec<Check> {
    let mut steps = Vec::new();
    let proxied = connector.proxy_for_url(url).is_some();
    let mut observe = |step: Step| steps.push(step);
    let outcome = match token {
        Some(token) => connector
            .connect_observed(url, Some(token), &mut observe)
            .map(|connection| Some(close(connection))),
        None => connector.reach_observed(url, &mut observe).map(|()| None),
    };

    let mut checks = Vec::new();
    let mut upgrade_done = false;
    for step in &steps {
        match step {
            Step::Resolved {
                host,
                addresses,
                looked_up,
            } => checks.push(resolved(host, addresses, *looked_up, proxied)),
            Step::Connected { addr } => {
                let whom = if proxied { "the proxy at " } else { "" };
                checks.push(Check::ok("tcp", format!("connected to {whom}{addr}")));
            }
            Step::Tunnelled => {
                if let Some(tcp) = checks.last_mut() {
                    tcp.detail
                        .push_str("; the proxy opened its tunnel to the platform");
                }
            }
            Step::Secured {
                version,
                pinned,
                spki_sha256,
            } => checks.push(secured(*version, *pinned, spki_sha256.as_ref())),
            Step::Upgraded => upgrade_done = true,
        }
    }
    if !url.is_secure() && checks.len() == 2 {
        checks.push(Check::info(
            "tls",
            "not used: plain-text ws:// is allowed to a loopback address only",
        ));
    }
    match outcome {
        Err(e) => {
            // A token that cannot be sent is refused before anything is
            // connected: the steps before the upgrade did not run.
            let at = match e {
                TransportError::InvalidToken => LABELS.len() - 1,
                _ => checks.len(),
            };
            for label in LABELS.iter().take(at).skip(checks.len()) {
                checks.push(Check::info(
                    label,
                    "skipped: the stored access token cannot be sent",
                ));
            }
            let label = LABELS.get(at).copied().unwrap_or("upgrade");
            checks.push(Check::fail(label, failure(label, &e)));
            checks.extend(skipped_from(at + 1, &format!("{label} failed")));
        }
        Ok(Some(closed)) if upgrade_done => checks.push(Check::ok(
            "upgrade",
            format!("HTTP 101 with the stored access token; {closed} (no HELLO sent)"),
        )),
        Ok(_) => checks.push(Check::info(
            "upgrade",
            "skipped: no stored access token could be read (see secret_store)",
        )),
    }
    checks
}

/// The `dns` line of a successful resolution.
fn resolved(host: &str, addresses: &[SocketAddr], looked_up: bool, proxied: bool) -> Check {
    let host = crate::text::one_line(host);
    let whose = if proxied { "the proxy's host " } else { "" };
    if !looked_up {
        return Check::ok(
            "dns",
            format!("{whose}{host} is an IP address: no lookup needed"),
        );
    }
    let shown: Vec<String> = addresses
        .iter()
        .take(4)
        .map(|a| a.ip().to_string())
        .collect();
    let more = if addresses.len() > shown.len() {
        format!(" and {} more", addresses.len() - shown.len())
    } else {
        String::new()
    };
    Check::ok(
        "dns",
        format!("{whose}{host} resolves to {}{more}", shown.join(", ")),
    )
}

/// The `tls` line of a completed handshake.
fn secured(
    version: Option<rustls::ProtocolVersion>,
    pinned: bool,
    spki: Option<&[u8; 32]>,
) -> Check {
    let version = match version {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3".to_owned(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2".to_owned(),
        Some(other) => format!("{other:?}"),
        None => "TLS".to_owned(),
    };
    let key = spki.map(|d| crate::audit::record::hex(d));
    let detail = match (pinned, key) {
        (true, _) => format!("{version}; certificate chain verified; SPKI pin matched"),
        (false, Some(key)) => format!(
            "{version}; certificate chain verified; no pin set (the server key's SPKI \
             SHA-256 is {key}; tls_pin_sha256 pins it)"
        ),
        (false, None) => format!("{version}; certificate chain verified; no pin set"),
    };
    Check::ok("tls", detail)
}

/// What to say when the step `label` failed with `error`.
fn failure(label: &str, error: &TransportError) -> String {
    let hint = match (label, error) {
        ("dns", _) => "check the host name in platform_url and this machine's DNS settings",
        ("tcp", TransportError::ProxyRefused { .. } | TransportError::ProxyResponse(_)) => {
            "check the proxy setting (HTTPS_PROXY) and its credentials"
        }
        ("tcp", _) => {
            "check that the platform is reachable from this machine (firewall, proxy: HTTPS_PROXY)"
        }
        ("tls", TransportError::PinMismatch) => {
            "the pins in tls_pin_sha256 (--tls-pin-sha256) do not name the server's key: \
             update them, or check that nothing intercepts the connection"
        }
        ("tls", _) => {
            "the server's certificate is not trusted for this name: with a private CA, set \
             tls_ca_file (--ca-file) to its PEM file"
        }
        (_, TransportError::Unauthorized { .. }) => {
            "start refreshes the access token once with the refresh token; if the platform \
             refuses that too, run `autogpt-shim auth`"
        }
        (_, TransportError::Forbidden { .. }) => {
            "the platform refuses this machine or session: check the binding in the platform"
        }
        (_, TransportError::InvalidToken) => "run `autogpt-shim auth` to store a new token",
        _ => {
            "start retries with backoff; if it persists, the platform is not answering as expected"
        }
    };
    format!("{error}; {hint}")
}

/// `skipped` lines for the steps from index `from` on.
fn skipped_from(from: usize, why: &str) -> Vec<Check> {
    LABELS
        .iter()
        .skip(from)
        .map(|label| Check::info(label, format!("skipped: {why}")))
        .collect()
}

/// Ends an upgraded connection at once: close 1000, then its reply, for at
/// most [`CLOSE_WAIT`]. Says how it ended.
fn close(connection: crate::transport::Connection) -> String {
    let (mut reader, writer) = match connection.split() {
        Ok(halves) => halves,
        Err(_) => return "the connection was dropped".to_owned(),
    };
    if writer.close(1000, CLOSE_REASON).is_err() {
        writer.abort();
        return "the connection was dropped (the close frame could not be sent)".to_owned();
    }
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        match reader.read() {
            Ok(Incoming::Closed(_)) | Err(TransportError::Closed) => {
                return "closed with 1000 at once".to_owned();
            }
            Ok(_) if Instant::now() < deadline => {}
            Ok(_) => {
                writer.abort();
                return format!(
                    "sent close 1000 at once (no close reply within {} s)",
                    CLOSE_WAIT.as_secs()
                );
            }
            Err(_) => return "sent close 1000 at once (the connection then ended)".to_owned(),
        }
    }
}
