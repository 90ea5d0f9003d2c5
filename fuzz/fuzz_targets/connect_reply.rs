//! Fuzzes the reading of a proxy's reply to `CONNECT`: any bytes as the
//! response head, judged on their own and read as a stream that ends with
//! them. Neither may panic, a status the head check accepts is always three
//! digits, and the stream reader accepts only what the head check accepts.
#![no_main]

use autogpt_shim::transport::{parse_connect_response, read_connect_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head = parse_connect_response(data);
    if let Ok(status) = head {
        assert!((100..=999).contains(&status), "status {status}");
        assert!(data.ends_with(b"\r\n\r\n"));
    }
    let mut stream = data;
    if read_connect_reply(&mut stream).is_ok() {
        assert_eq!(head, Ok(200));
    }
});
