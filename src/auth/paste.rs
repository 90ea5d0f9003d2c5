//! What the user pastes at the prompt of `auth --no-browser`: the address
//! the browser was sent to at the end of the authorization (as shown in its
//! address bar), that address's query, or the authorization code alone.
//!
//! An address or query is judged exactly like a request to the callback
//! listener (AUTH.md §5), `state` included; a code alone cannot carry the
//! state, and is then bound to this run by the PKCE verifier only. What was
//! pasted is never printed, logged or quoted in a message: it holds the
//! authorization code.

use zeroize::Zeroizing;

use super::callback::{self, Callback};
use super::pkce::Pkce;

/// Longest paste taken as a code alone; real codes are far shorter.
const MAX_CODE: usize = 2048;

/// What a pasted line means for the flow.
#[derive(Debug)]
pub enum Pasted {
    /// Settles the flow as the same request to the callback would have.
    Settled(Callback),
    /// Nothing this flow can use; the user may paste again. The reason
    /// never quotes the paste.
    Unusable(String),
}

/// Judges one pasted line for the flow whose callback is `redirect_uri`
/// (`http://localhost:PORT/callback`).
pub fn judge(line: &str, redirect_uri: &str, pkce: &Pkce) -> Pasted {
    let text = unquote(line.trim());
    if text.is_empty() {
        return Pasted::Unusable("nothing was pasted".to_owned());
    }
    if text.contains("://") {
        let text = text.split_once('#').map_or(text, |(before, _)| before);
        let (base, query) = text.split_once('?').unwrap_or((text, ""));
        let loopback_ip = redirect_uri.replacen("//localhost:", "//127.0.0.1:", 1);
        if base != redirect_uri && base != loopback_ip {
            return Pasted::Unusable(format!(
                "that is not the address this authorization returns to; it starts with {redirect_uri}?"
            ));
        }
        if query.is_empty() {
            return Pasted::Unusable(
                "the address has no query; copy all of it, up to its end".to_owned(),
            );
        }
        return Pasted::Settled(callback::judge(pkce, query));
    }
    if text.contains('=') {
        let query = text.strip_prefix('?').unwrap_or(text);
        return Pasted::Settled(callback::judge(pkce, query));
    }
    if text.len() > MAX_CODE || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Pasted::Unusable(
            "a code is one word of printable characters; paste the whole address instead"
                .to_owned(),
        );
    }
    Pasted::Settled(Callback::Code(Zeroizing::new(text.to_owned())))
}

/// Removes one pair of quotes or angle brackets around a paste (terminals
/// and chat programs add them when copying).
fn unquote(text: &str) -> &str {
    for (open, close) in [('"', '"'), ('\'', '\''), ('<', '>')] {
        if let Some(inner) = text
            .strip_prefix(open)
            .and_then(|rest| rest.strip_suffix(close))
        {
            return inner.trim();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIRECT: &str = "http://localhost:41899/callback";

    fn pkce() -> Pkce {
        Pkce::from_parts("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "the-state")
    }

    fn code_of(pasted: Pasted) -> Option<String> {
        match pasted {
            Pasted::Settled(Callback::Code(code)) => Some(code.to_string()),
            _ => None,
        }
    }

    #[test]
    fn a_pasted_redirect_address_gives_its_code_when_the_state_matches() {
        for line in [
            "http://localhost:41899/callback?code=abc&state=the-state",
            "  http://localhost:41899/callback?state=the-state&code=abc#top \n",
            "\"http://localhost:41899/callback?code=abc&state=the-state\"",
            "<http://127.0.0.1:41899/callback?code=abc&state=the-state>",
            "?code=abc&state=the-state",
            "code=abc&state=the-state",
        ] {
            assert_eq!(
                code_of(judge(line, REDIRECT, &pkce())).as_deref(),
                Some("abc"),
                "{line}"
            );
        }
    }

    #[test]
    fn a_pasted_address_is_judged_like_the_callback() {
        let settled = |line: &str| match judge(line, REDIRECT, &pkce()) {
            Pasted::Settled(callback) => callback,
            other => panic!("{line}: {other:?}"),
        };
        assert!(matches!(
            settled("http://localhost:41899/callback?code=abc&state=other"),
            Callback::StateMismatch
        ));
        assert!(matches!(
            settled("http://localhost:41899/callback?code=abc"),
            Callback::StateMismatch
        ));
        assert!(matches!(settled("code=abc"), Callback::StateMismatch));
        assert!(matches!(
            settled("http://localhost:41899/callback?error=access_denied&state=the-state"),
            Callback::Denied(ref e) if e == "access_denied"
        ));
        assert!(matches!(
            settled("http://localhost:41899/callback?state=the-state"),
            Callback::NoCode
        ));
    }

    #[test]
    fn a_code_alone_is_taken_as_it_is() {
        assert_eq!(
            code_of(judge(" ac-0123abcd \n", REDIRECT, &pkce())).as_deref(),
            Some("ac-0123abcd")
        );
    }

    #[test]
    fn unusable_pastes_say_why_without_quoting_the_paste() {
        for line in [
            "",
            "   ",
            "http://localhost:41900/callback?code=secret-1&state=the-state",
            "https://platform.example/auth/authorize?x=secret-1",
            "http://localhost:41899/callback",
            "two words-secret-1",
            "\u{1b}[2Jsecret-1",
        ] {
            match judge(line, REDIRECT, &pkce()) {
                Pasted::Unusable(why) => assert!(!why.contains("secret-1"), "{why}"),
                other => panic!("{line:?}: {other:?}"),
            }
        }
        let long = "a".repeat(MAX_CODE + 1);
        assert!(matches!(
            judge(&long, REDIRECT, &pkce()),
            Pasted::Unusable(_)
        ));
    }
}
