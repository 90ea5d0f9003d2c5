//! `auth` (CLI.md §4.1, AUTH.md §3–§6, §13): the Authorization Code flow
//! with PKCE, from the callback listener to the stored tokens.
//!
//! Owns the order of the steps and the exit status of each failure. It
//! prints the authorize URL (which carries the challenge and the state, and
//! nothing else secret) and never prints the code, the verifier, the state
//! on its own, or a token.

use std::io::Write;

use super::load_config;
use crate::auth::browser;
use crate::auth::callback::{CALLBACK_TIMEOUT, Callback, Listener};
use crate::auth::oauth::{self, OAuthError};
use crate::auth::pkce::Pkce;
use crate::config::{Environment, Overrides};
use crate::exit;
use crate::log::Log;
use crate::secrets::{ErrorClass, SecretError};

/// Runs `auth` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let env = Environment::from_process();
    let log = Log::stderr(config.log_level);
    // The store first: a flow whose tokens could not be kept is wasted.
    let store = match super::select_store_asking(&config, &env, &log, stderr) {
        Ok(store) => store,
        Err(e) => return store_failure(&e, stderr),
    };
    if let Err(e) = store.tokens() {
        return store_failure(&e, stderr);
    }
    let connector = match super::connector(&config, &env, stderr) {
        Ok(connector) => connector,
        Err(code) => return code,
    };
    let listener = match Listener::bind(config.oauth_redirect_port) {
        Ok(listener) => listener,
        Err(e) => {
            say!(stderr, "Authentication failed: {e}");
            return exit::EX_TEMPFAIL;
        }
    };
    let pkce = match Pkce::generate() {
        Ok(pkce) => pkce,
        Err(e) => {
            say!(
                stderr,
                "Authentication failed: no randomness available: {}",
                e.0
            );
            return exit::EX_SOFTWARE;
        }
    };
    let redirect_uri = listener.redirect_uri();
    let url = oauth::authorize_url(
        config.endpoints.authorize(),
        &config.oauth_client_id,
        &redirect_uri,
        &pkce,
    );
    say!(
        stdout,
        "Opening the browser to authorize this machine. If it does not open, visit this URL:"
    );
    say!(stdout, "{}", url.as_str());
    let _ = stdout.flush();
    browser::open(&url, &env);

    let code = match listener.wait(&pkce, CALLBACK_TIMEOUT) {
        Callback::Code(code) => code,
        Callback::TimedOut => {
            say!(
                stderr,
                "Authentication failed: no authorization arrived within {} seconds",
                CALLBACK_TIMEOUT.as_secs()
            );
            return exit::EX_TEMPFAIL;
        }
        Callback::Denied(error) => {
            say!(
                stderr,
                "Authentication failed: authorization denied ({error})"
            );
            return exit::EX_NOPERM;
        }
        Callback::StateMismatch => {
            say!(stderr, "Authentication failed: state did not match");
            return exit::EX_NOPERM;
        }
        Callback::NoCode => {
            say!(
                stderr,
                "Authentication failed: no authorization code received"
            );
            return exit::EX_NOPERM;
        }
    };
    let issued = match oauth::exchange(
        &connector,
        config.endpoints.token(),
        &code,
        &redirect_uri,
        &config.oauth_client_id,
        &pkce,
    ) {
        Ok(issued) => issued,
        Err(e) => {
            say!(stderr, "Authentication failed: {e}");
            return match e {
                OAuthError::Status(status) if (400..500).contains(&status) => exit::EX_NOPERM,
                OAuthError::Unusable(_) => exit::EX_PROTOCOL,
                OAuthError::Status(_) | OAuthError::Unreachable(_) => exit::EX_UNAVAILABLE,
            };
        }
    };
    let Some(refresh) = issued.refresh else {
        // `exchange` requires it; kept as a check rather than a panic.
        say!(
            stderr,
            "Authentication failed: the token response has no refresh token"
        );
        return exit::EX_PROTOCOL;
    };
    if let Err(e) = store.store_tokens(&refresh, &issued.access) {
        return store_failure(&e, stderr);
    }
    say!(
        stdout,
        "Authentication succeeded. Tokens are stored in {}.",
        store.location()
    );
    exit::SUCCESS
}

fn store_failure(error: &SecretError, stderr: &mut dyn Write) -> u8 {
    say!(stderr, "Authentication failed: {error}");
    match error.class() {
        ErrorClass::Internal => exit::EX_SOFTWARE,
        ErrorClass::Config | ErrorClass::Unavailable => exit::EX_CONFIG,
    }
}
