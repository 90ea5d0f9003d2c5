//! The connections' tokens (AUTH.md §7): the access token read at start,
//! kept in memory for the upgrades, and the forced refresh after an HTTP
//! 401, serialised for the whole process by one lock.
//!
//! Inside the lock the stored access token is read again; one that differs
//! from the refused token (rotated by `autogpt-shim auth` or by another
//! connection) is used without asking the token endpoint. Otherwise the
//! stored refresh token is exchanged once; the new tokens are stored
//! refresh token first, `TOKEN_REFRESHED` is recorded through the
//! connection's audit handle, and every connection then uses the new
//! access token. A 400/401 from the token endpoint, or no refresh token,
//! is a definitive refusal; a network failure, a timeout or any other
//! status keeps the stored tokens and is retried with backoff.

use std::sync::{Arc, Mutex, PoisonError};

use zeroize::Zeroizing;

use super::oauth::{self, OAuthError};
use crate::audit::{Details, Entry};
use crate::daemon::runtime::{Credentials, Renewal};
use crate::daemon::session::AuditSink;
use crate::secrets::{SecretStore, SecretString};
use crate::transport::Connector;

/// Where refreshes go.
#[derive(Debug, Clone)]
pub struct TokenEndpoint {
    /// Opens the connection (trust anchors, pins, proxy).
    pub connector: Arc<Connector>,
    /// AUTH.md §1: http-ify(`platform_url`) + `/api/oauth/token`.
    pub url: String,
    /// The public client's id.
    pub client_id: String,
}

/// Tokens from the secret store.
#[derive(Debug)]
pub struct StoredCredentials {
    store: SecretStore,
    endpoint: TokenEndpoint,
    /// The access token the upgrades use; the lock also serialises renewal.
    current: Mutex<Option<Zeroizing<String>>>,
}

impl StoredCredentials {
    /// Tokens from `store`, starting with the access token read at start.
    pub fn new(
        store: SecretStore,
        access: Option<&SecretString>,
        endpoint: TokenEndpoint,
    ) -> StoredCredentials {
        StoredCredentials {
            store,
            endpoint,
            current: Mutex::new(access.map(|t| Zeroizing::new(t.expose().to_owned()))),
        }
    }

    fn refresh(&self, audit: &AuditSink) -> Result<Zeroizing<String>, Renewal> {
        let stored = self.store.refresh_token().map_err(|e| {
            Renewal::Transient(format!("cannot read the stored refresh token: {e}"))
        })?;
        let Some(refresh_token) = stored else {
            return Err(Renewal::Definitive(
                "the access token was refused and no refresh token is stored; run autogpt-shim auth"
                    .into(),
            ));
        };
        let issued = oauth::refresh(
            &self.endpoint.connector,
            &self.endpoint.url,
            refresh_token.expose(),
            &self.endpoint.client_id,
        )
        .map_err(|e| match e {
            OAuthError::Status(status) if e.is_definitive_refusal() => {
                Renewal::Definitive(format!(
                    "the token endpoint refused the refresh (HTTP {status}); run autogpt-shim auth"
                ))
            }
            other => Renewal::Transient(format!("the token refresh failed: {other}")),
        })?;
        // A response without a refresh token keeps the old one.
        let refresh = issued.refresh.unwrap_or(refresh_token);
        self.store
            .store_tokens(&refresh, &issued.access)
            .map_err(|e| Renewal::Transient(format!("cannot store the refreshed tokens: {e}")))?;
        if !audit.write(Entry::event("TOKEN_REFRESHED", Details::new())) {
            return Err(Renewal::AuditFailed);
        }
        Ok(Zeroizing::new(issued.access.expose().to_owned()))
    }
}

impl Credentials for StoredCredentials {
    fn access_token(&self) -> Result<Option<Zeroizing<String>>, String> {
        Ok(self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    fn renew(&self, rejected: Option<&Zeroizing<String>>, audit: &AuditSink) -> Renewal {
        // Held for the whole renewal: connections renew one at a time.
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        // Step 1: another connection (or `auth`) may have rotated it.
        match self.store.access_token() {
            Ok(Some(stored)) if rejected.is_none_or(|r| r.as_str() != stored.expose()) => {
                let token = Zeroizing::new(stored.expose().to_owned());
                *current = Some(token.clone());
                return Renewal::Retry(token);
            }
            Ok(_) => {}
            Err(e) => {
                return Renewal::Transient(format!("cannot read the stored access token: {e}"));
            }
        }
        // Steps 2–6.
        match self.refresh(audit) {
            Ok(token) => {
                *current = Some(token.clone());
                Renewal::Retry(token)
            }
            Err(renewal) => renewal,
        }
    }
}
