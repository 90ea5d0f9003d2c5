//! Fuzz target: the wire codec's decoder.
//!
//! Any byte string may arrive from the platform (PROTOCOL.md §1.2: text and
//! binary WebSocket frames alike), so `decode` must never panic, whatever it
//! is given. Whatever it accepts must survive a round trip: encoding the
//! decoded frame succeeds, and decoding the result yields an equal frame.

#![no_main]

use autogpt_shim::protocol::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = decode(data) else {
        return;
    };
    let text = match encode(&frame) {
        Ok(text) => text,
        Err(err) => panic!("a decoded frame does not encode: {err}\nframe: {frame:?}"),
    };
    match decode(&text) {
        Ok(again) => assert_eq!(again, frame, "re-decoded frame differs from the original"),
        Err(err) => panic!(
            "encode produced text that decode rejects: {err:?}\nframe: {frame:?}\nencoded: {text}"
        ),
    }
});
