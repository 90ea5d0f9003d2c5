//! The OAuth requests (AUTH.md §4, §6, §7.3, §11): the authorize URL, the
//! code exchange, the refresh and the revocation, with their bodies byte
//! for byte as the specification fixes them, and the classification of
//! every outcome.
//!
//! Tokens, codes and verifiers only ever travel in request bodies over the
//! transport's verified TLS (or to loopback); they are held zeroizing and
//! never appear in an error message. A response larger than 64 KiB, one
//! that is not JSON, one without the tokens the grant must return, or one
//! whose tokens contain control characters is an unusable response, never
//! partially stored.

use std::fmt;

use serde_json::Value;
use zeroize::Zeroizing;

use super::form;
use super::pkce::Pkce;
use crate::secrets::SecretString;
use crate::transport::{Connector, TransportError};

/// The one scope requested (AUTH.md §2).
pub const SCOPE: &str = "USE_TOOLS";

/// Largest token response accepted.
pub const MAX_RESPONSE: usize = 64 * 1024;

/// The authorize URL of §4: the endpoint and seven parameters in order.
pub fn authorize_url(
    endpoint: &str,
    client_id: &str,
    redirect_uri: &str,
    pkce: &Pkce,
) -> Zeroizing<String> {
    let query = form::body(&[
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("scope", SCOPE),
        ("code_challenge", &pkce.challenge()),
        ("code_challenge_method", "S256"),
        ("state", pkce.state()),
    ]);
    Zeroizing::new(format!("{endpoint}?{}", query.as_str()))
}

/// The body of the code exchange (§6).
pub fn exchange_body(
    code: &str,
    redirect_uri: &str,
    client_id: &str,
    verifier: &str,
) -> Zeroizing<String> {
    form::body(&[
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("client_id", client_id),
        ("code_verifier", verifier),
    ])
}

/// The body of a refresh (§7.3 step 3).
pub fn refresh_body(refresh_token: &str, client_id: &str) -> Zeroizing<String> {
    form::body(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
        ("client_id", client_id),
    ])
}

/// The JSON body of one revocation (§11 step 2), members in order.
pub fn revoke_body(token: &str, hint: &str, client_id: &str) -> Zeroizing<String> {
    let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    Zeroizing::new(format!(
        "{{\"token\": {}, \"token_type_hint\": {}, \"client_id\": {}, \"client_secret\": \"\"}}",
        Zeroizing::new(quoted(token)).as_str(),
        quoted(hint),
        quoted(client_id)
    ))
}

/// Why a request to the token or revoke endpoint did not give tokens.
#[derive(Debug)]
pub enum OAuthError {
    /// The endpoint could not be reached, or timed out.
    Unreachable(TransportError),
    /// The endpoint answered with this non-2xx status.
    Status(u16),
    /// A 2xx answer that cannot be used (not JSON, missing tokens, too
    /// large).
    Unusable(&'static str),
}

impl OAuthError {
    /// AUTH.md §7.3 hardening note: 400/401 (or no refresh token) means the
    /// stored credentials cannot work; everything else may pass.
    pub fn is_definitive_refusal(&self) -> bool {
        matches!(self, OAuthError::Status(400 | 401))
    }
}

impl fmt::Display for OAuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OAuthError::Unreachable(e) => write!(f, "the token endpoint could not be reached: {e}"),
            OAuthError::Status(status) => write!(f, "the endpoint answered HTTP {status}"),
            OAuthError::Unusable(why) => write!(f, "the endpoint's answer is unusable: {why}"),
        }
    }
}

impl std::error::Error for OAuthError {}

/// Tokens from a token response.
#[derive(Debug)]
pub struct Issued {
    /// The new access token.
    pub access: SecretString,
    /// The new refresh token, when the response carried one.
    pub refresh: Option<SecretString>,
}

/// One POST; the body of a 2xx answer, else why not.
fn post(
    connector: &Connector,
    url: &str,
    content_type: &str,
    body: &str,
) -> Result<Zeroizing<Vec<u8>>, OAuthError> {
    let response = connector
        .post(url, content_type, body.as_bytes(), MAX_RESPONSE)
        .map_err(|e| match e {
            TransportError::MessageTooLarge { .. } => {
                OAuthError::Unusable("the response is larger than 64 KiB")
            }
            other => OAuthError::Unreachable(other),
        })?;
    if !(200..300).contains(&response.status) {
        return Err(OAuthError::Status(response.status));
    }
    Ok(response.body)
}

fn post_form(
    connector: &Connector,
    url: &str,
    body: &str,
) -> Result<Zeroizing<Vec<u8>>, OAuthError> {
    post(connector, url, "application/x-www-form-urlencoded", body)
}

/// Reads `access_token` (required) and `refresh_token` (required when
/// `need_refresh`) from a JSON body.
fn parse_tokens(body: &[u8], need_refresh: bool) -> Result<Issued, OAuthError> {
    let value: Zeroizing<String> = Zeroizing::new(
        String::from_utf8(body.to_vec()).map_err(|_| OAuthError::Unusable("not UTF-8"))?,
    );
    let mut json: Value =
        serde_json::from_str(&value).map_err(|_| OAuthError::Unusable("not JSON"))?;
    let take = |json: &mut Value, name: &str| match json.get_mut(name) {
        Some(Value::String(text)) if !text.is_empty() => {
            Some(SecretString::new(std::mem::take(text)))
        }
        _ => None,
    };
    if !json.is_object() {
        return Err(OAuthError::Unusable("not a JSON object"));
    }
    let access =
        take(&mut json, "access_token").ok_or(OAuthError::Unusable("no access_token string"))?;
    let refresh = take(&mut json, "refresh_token");
    // A token goes into an HTTP header: CR/LF would inject headers, and NUL,
    // DEL or other controls have no place in one. Nothing of such an answer
    // is kept, the good token beside it included.
    let has_control = |token: &SecretString| token.expose().chars().any(char::is_control);
    if has_control(&access) || refresh.as_ref().is_some_and(has_control) {
        return Err(OAuthError::Unusable("a token contains control characters"));
    }
    if need_refresh && refresh.is_none() {
        return Err(OAuthError::Unusable("no refresh_token string"));
    }
    Ok(Issued { access, refresh })
}

/// §6: exchanges the code for both tokens.
pub fn exchange(
    connector: &Connector,
    token_url: &str,
    code: &str,
    redirect_uri: &str,
    client_id: &str,
    pkce: &Pkce,
) -> Result<Issued, OAuthError> {
    let body = exchange_body(code, redirect_uri, client_id, pkce.verifier());
    let response = post_form(connector, token_url, &body)?;
    parse_tokens(&response, true)
}

/// §7.3 steps 3–4: a new access token (and perhaps a new refresh token).
pub fn refresh(
    connector: &Connector,
    token_url: &str,
    refresh_token: &str,
    client_id: &str,
) -> Result<Issued, OAuthError> {
    let body = refresh_body(refresh_token, client_id);
    let response = post_form(connector, token_url, &body)?;
    parse_tokens(&response, false)
}

/// §11 step 2: one revocation request.
pub fn revoke(
    connector: &Connector,
    revoke_url: &str,
    token: &str,
    hint: &str,
    client_id: &str,
) -> Result<(), OAuthError> {
    let body = revoke_body(token, hint, client_id);
    let response = connector
        .post(
            revoke_url,
            "application/json",
            body.as_bytes(),
            MAX_RESPONSE,
        )
        .map_err(|e| match e {
            // A large body on success is no reason to keep the tokens.
            TransportError::MessageTooLarge { .. } => {
                OAuthError::Unusable("the response is larger than 64 KiB")
            }
            other => OAuthError::Unreachable(other),
        })?;
    if (200..300).contains(&response.status) {
        Ok(())
    } else {
        Err(OAuthError::Status(response.status))
    }
}
