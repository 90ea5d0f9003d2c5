//! Fuzzes the parser of a proxy's reply to `CONNECT`: any bytes as the
//! response head. It must never panic, and a status it accepts is always
//! three digits.
#![no_main]

use autogpt_shim::transport::proxy::parse_connect_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(status) = parse_connect_response(data) {
        assert!((100..=999).contains(&status), "status {status}");
        assert!(data.ends_with(b"\r\n\r\n"));
    }
});
