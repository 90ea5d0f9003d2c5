//! PKCE and `state` (AUTH.md §3): a 64-byte verifier, its S256 challenge,
//! and a 32-byte state, all unpadded base64url from the OS CSPRNG.
//!
//! The verifier and the state are secrets until the flow ends: they are
//! kept zeroizing, compared in constant time, and never printed except
//! inside the authorize URL the user opens (challenge and state only).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// One authorization attempt's secrets.
pub struct Pkce {
    verifier: Zeroizing<String>,
    state: Zeroizing<String>,
}

impl std::fmt::Debug for Pkce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pkce(..)")
    }
}

/// No randomness was available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRandomness(pub String);

impl Pkce {
    /// Fresh secrets from the CSPRNG.
    pub fn generate() -> Result<Pkce, NoRandomness> {
        let mut verifier = Zeroizing::new([0u8; 64]);
        let mut state = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut verifier[..]).map_err(|e| NoRandomness(e.to_string()))?;
        getrandom::fill(&mut state[..]).map_err(|e| NoRandomness(e.to_string()))?;
        Ok(Pkce::from_bytes(&verifier[..], &state[..]))
    }

    /// The secrets for given random bytes (test vectors).
    pub fn from_bytes(verifier: &[u8], state: &[u8]) -> Pkce {
        Pkce {
            verifier: Zeroizing::new(URL_SAFE_NO_PAD.encode(verifier)),
            state: Zeroizing::new(URL_SAFE_NO_PAD.encode(state)),
        }
    }

    /// The secrets given as text (the specification's vectors use a state
    /// that is not the encoding of whole bytes).
    pub fn from_parts(verifier: &str, state: &str) -> Pkce {
        Pkce {
            verifier: Zeroizing::new(verifier.to_owned()),
            state: Zeroizing::new(state.to_owned()),
        }
    }

    /// The verifier sent with the code exchange.
    pub fn verifier(&self) -> &str {
        &self.verifier
    }

    /// The state sent in the authorize URL.
    pub fn state(&self) -> &str {
        &self.state
    }

    /// `S256` challenge of the verifier.
    pub fn challenge(&self) -> String {
        challenge(&self.verifier)
    }

    /// Whether `received` is the state, compared in constant time.
    pub fn state_matches(&self, received: &str) -> bool {
        let a = self.state.as_bytes();
        let b = received.as_bytes();
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// base64url-without-padding(SHA-256(verifier)).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}
