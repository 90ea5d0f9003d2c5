//! Fuzzes the audit log verifier: any bytes as a log file, checked with the
//! key of the committed audit vectors (so seeds taken from them verify and
//! mutations reach the chain and HMAC checks). It must never panic, an empty
//! file is clean, and a file that does not end with LF is reported as
//! truncated first.
#![no_main]

use autogpt_shim::audit::{AuditKey, ViolationKind, verify_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The bytes of audit-vectors/key.hex.
    let Ok(key) = AuditKey::new((0u8..32).collect()) else {
        return;
    };
    let violations = verify_bytes(data, &key);
    if data.is_empty() {
        assert!(violations.is_empty());
    } else if !data.ends_with(b"\n") {
        assert_eq!(
            violations.first().map(|v| v.kind),
            Some(ViolationKind::Truncated)
        );
    }
});
