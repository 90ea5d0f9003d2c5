//! Fuzzes the HTTP response reader the OAuth client uses: any bytes as what
//! the server sent before closing the connection. It must never panic, and
//! a body it returns never exceeds the bound it was given, whatever the
//! framing (`Content-Length`, chunked, or until the end).
#![no_main]

use autogpt_shim::transport::parse_response;
use libfuzzer_sys::fuzz_target;

/// The bound the OAuth client reads its responses with.
const MAX_BODY: usize = autogpt_shim::auth::MAX_RESPONSE;

fuzz_target!(|data: &[u8]| {
    if let Ok(response) = parse_response(data, MAX_BODY) {
        assert!(response.body.len() <= MAX_BODY);
        // Three digits, leading zeros allowed (the caller judges the value).
        assert!(response.status <= 999);
    }
});
