//! `revoke` (CLI.md §4.4, AUTH.md §11): both tokens revoked on the platform
//! as the public client, then deleted locally — only when every request
//! succeeded, so a failed revocation can be retried.
//!
//! It never prints a token, never deletes anything after a failure, and
//! never reports a revocation that did not happen: with no token stored it
//! says so and exits 1 (a negative result, like `audit show` finding no
//! record), having sent nothing.

use std::io::Write;

use super::{PROGRAM, load_config};
use crate::auth::oauth;
use crate::config::{Environment, Overrides};
use crate::exit;
use crate::secrets::SecretStore;

/// Runs `revoke` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let env = Environment::from_process();
    let incomplete = |stderr: &mut dyn Write, why: &dyn std::fmt::Display| {
        say!(
            stderr,
            "Revocation did not complete: {why}. The local credentials were kept; try again."
        );
        exit::NEGATIVE_RESULT
    };
    let selected = match SecretStore::select(&config.paths, &env) {
        Ok(selected) => selected,
        Err(e) => return incomplete(stderr, &e),
    };
    if let Some(warning) = &selected.warning {
        say!(stderr, "{PROGRAM}: {warning}");
    }
    let tokens = match selected.store.tokens() {
        Ok(tokens) => tokens,
        Err(e) => return incomplete(stderr, &e),
    };
    let pairs: Vec<_> = [
        (tokens.access.as_ref(), "access_token"),
        (tokens.refresh.as_ref(), "refresh_token"),
    ]
    .into_iter()
    .filter_map(|(token, hint)| token.map(|t| (t, hint)))
    .collect();
    if pairs.is_empty() {
        say!(
            stdout,
            "No stored tokens in {}: nothing was revoked. Run `autogpt-shim auth` to authorize this machine.",
            selected.store.location()
        );
        return exit::NEGATIVE_RESULT;
    }
    let connector = match super::connector(&config, &env, stderr) {
        Ok(connector) => connector,
        Err(code) => return code,
    };
    for (token, hint) in pairs {
        if let Err(e) = oauth::revoke(
            &connector,
            config.endpoints.revoke(),
            token.expose(),
            hint,
            &config.oauth_client_id,
        ) {
            return incomplete(
                stderr,
                &format!("revoking the {} failed: {e}", hint.replace('_', " ")),
            );
        }
    }
    if let Err(e) = selected.store.clear_tokens() {
        return incomplete(
            stderr,
            &format!("the tokens were revoked but could not be deleted: {e}"),
        );
    }
    say!(
        stdout,
        "Tokens revoked and deleted. Run `autogpt-shim auth` to authenticate again."
    );
    exit::SUCCESS
}
