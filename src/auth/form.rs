//! `application/x-www-form-urlencoded` as the OAuth requests and the
//! authorize URL spell it (AUTH.md §4): every byte outside the unreserved
//! set (`A–Z`, `a–z`, `0–9`, `_`, `.`, `-`, `~`) is percent-encoded with
//! uppercase hex and a space becomes `+`; and the decoding of a callback's
//! query string.

use zeroize::Zeroizing;

use crate::transport::percent;

/// Encodes one value: the percent-encoding of the WebSocket path, with
/// `+` for a space.
pub fn encode(value: &str) -> String {
    percent::encode(value).replace("%20", "+")
}

/// `name=value&…` in the given order. The result may hold secrets (codes,
/// tokens, verifiers), so it is zeroized when dropped.
pub fn body(fields: &[(&str, &str)]) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::new());
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&encode(name));
        out.push('=');
        out.push_str(&encode(value));
    }
    out
}

/// Decodes a query string: `+` is a space, `%XX` a byte; pairs in order.
/// Undecodable text (bad escapes, invalid UTF-8) keeps its raw form, which
/// can then never match an expected value.
pub fn parse_query(query: &str) -> Vec<(String, Zeroizing<String>)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name).to_string(), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> Zeroizing<String> {
    let mut out = Zeroizing::new(Vec::with_capacity(text.len()));
    percent::decode_form_into(text, &mut out);
    match String::from_utf8(out.to_vec()) {
        Ok(s) => Zeroizing::new(s),
        Err(_) => Zeroizing::new(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_uses_the_unreserved_set_and_plus_for_space() {
        assert_eq!(
            encode("http://localhost:41899/callback"),
            "http%3A%2F%2Flocalhost%3A41899%2Fcallback"
        );
        assert_eq!(encode("a b~c"), "a+b~c");
        assert_eq!(encode("Ü"), "%C3%9C");
    }

    #[test]
    fn query_decoding_keeps_order_and_decodes_escapes() {
        let q = parse_query("code=a%2Bb+c&state=x&code=second&empty=&bad=%zz%4");
        let pairs: Vec<(String, String)> = q.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        assert_eq!(
            pairs,
            [
                ("code".into(), "a+b c".into()),
                ("state".into(), "x".into()),
                ("code".into(), "second".into()),
                ("empty".into(), String::new()),
                ("bad".into(), "%zz%4".into()),
            ]
        );
    }
}
