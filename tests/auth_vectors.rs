//! AUTH.md §14 vectors verbatim: PKCE, the authorize URL and the request
//! bodies; and the callback's query rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use autogpt_shim::auth::{
    Pkce, authorize_url, challenge, exchange_body, refresh_body, revoke_body,
};
use autogpt_shim::config::Endpoints;

const RFC_VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

#[test]
fn pkce_vectors() {
    assert_eq!(
        challenge(RFC_VERIFIER),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
    let bytes: Vec<u8> = (0u8..64).collect();
    let pkce = Pkce::from_bytes(&bytes, &[0; 32]);
    assert_eq!(
        pkce.verifier(),
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-Pw"
    );
    assert_eq!(pkce.verifier().len(), 86);
    assert_eq!(
        pkce.challenge(),
        "wsNdZaf3VpLTsEDmR5gPk2C6xYVWxKb0xcaG3O6kX10"
    );
    assert_eq!(pkce.state().len(), 43);
}

#[test]
fn generated_secrets_have_the_specified_shape_and_differ() {
    let a = Pkce::generate().unwrap();
    let b = Pkce::generate().unwrap();
    assert_eq!(a.verifier().len(), 86);
    assert_eq!(a.state().len(), 43);
    assert_ne!(a.verifier(), b.verifier());
    assert_ne!(a.state(), b.state());
    assert!(a.state_matches(a.state()));
    assert!(!a.state_matches(b.state()));
    assert!(!a.state_matches(""));
}

#[test]
fn authorize_url_vector() {
    let endpoints = Endpoints::derive("wss://platform.autogpt.net", None, None);
    let pkce = Pkce::from_parts(RFC_VERIFIER, "af0ifjsldkj");
    let url = authorize_url(
        endpoints.authorize(),
        "autogpt-local-executor",
        "http://localhost:41899/callback",
        &pkce,
    );
    assert_eq!(
        url.as_str(),
        "https://platform.autogpt.net/auth/authorize?response_type=code&client_id=autogpt-local-executor&redirect_uri=http%3A%2F%2Flocalhost%3A41899%2Fcallback&scope=USE_TOOLS&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256&state=af0ifjsldkj"
    );
}

#[test]
fn reference_authorize_url_uses_the_oauth_base_and_port() {
    let endpoints = Endpoints::derive("https://platform.example.com", None, None);
    let pkce = Pkce::generate().unwrap();
    let url = authorize_url(
        endpoints.authorize(),
        "autogpt-local-executor",
        "http://localhost:41903/callback",
        &pkce,
    );
    assert!(url.starts_with("https://platform.example.com/auth/authorize?"));
    assert!(url.contains("&scope=USE_TOOLS&"));
    assert!(url.contains("redirect_uri=http%3A%2F%2Flocalhost%3A41903%2Fcallback"));
    assert!(url.ends_with(&format!("&state={}", pkce.state())));
}

#[test]
fn request_body_vectors() {
    assert_eq!(
        exchange_body(
            "SplxlOBeZQQYbYS6WxSbIA",
            "http://localhost:41899/callback",
            "autogpt-local-executor",
            RFC_VERIFIER
        )
        .as_str(),
        "grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA&redirect_uri=http%3A%2F%2Flocalhost%3A41899%2Fcallback&client_id=autogpt-local-executor&code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    );
    assert_eq!(
        refresh_body("rt-example", "autogpt-local-executor").as_str(),
        "grant_type=refresh_token&refresh_token=rt-example&client_id=autogpt-local-executor"
    );
    assert_eq!(
        revoke_body("at-example", "access_token", "autogpt-local-executor").as_str(),
        r#"{"token": "at-example", "token_type_hint": "access_token", "client_id": "autogpt-local-executor", "client_secret": ""}"#
    );
}

#[test]
fn reference_exchange_vector() {
    let endpoints = Endpoints::derive("https://platform.example.com", None, None);
    assert_eq!(
        endpoints.token(),
        "https://platform.example.com/api/oauth/token"
    );
    assert_eq!(
        exchange_body(
            "code",
            "http://localhost:41907/callback",
            "autogpt-local-executor",
            "verifier"
        )
        .as_str(),
        "grant_type=authorization_code&code=code&redirect_uri=http%3A%2F%2Flocalhost%3A41907%2Fcallback&client_id=autogpt-local-executor&code_verifier=verifier"
    );
}
