//! The audit log against the specification's worked example (AUDIT.md §12)
//! and every vector in `audit-vectors/`, plus the float formatting against
//! Python's own `repr` for 100,000 values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use autogpt_shim::audit::{AuditKey, Details, Outcome, Record, repr_f64, verify_bytes};
use serde_json::json;
use sha2::{Digest, Sha256};

const MACHINE: &str = "123e4567-e89b-12d3-a456-426614174000";
const VERSION: &str = "0.0.1-experimental";

fn key() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

fn record(ts: f64, session: &str, request: Option<&str>, op: &str, details: Details) -> Record {
    Record {
        ts,
        session_id: session.into(),
        machine_id: MACHINE.into(),
        shim_version: VERSION.into(),
        request_id: request.map(str::to_owned),
        op: op.into(),
        details,
        result: Outcome::default(),
        seq: 0,
        prev_hmac: None,
    }
}

/// The four records of §12.1–§12.4, chained.
fn worked_example() -> Vec<Record> {
    let command = "echo \"café\"\tdone\nls C:\\tmp\u{1} \u{1f600}";
    assert_eq!(command.chars().count(), 29);
    let mut records = vec![
        record(
            1712345678.123,
            "-",
            None,
            "SHIM_START",
            Details::new().with("shim_version", json!(VERSION)),
        ),
        record(
            1712345679.5,
            "sess-7f3a",
            Some("msg-0001"),
            "EXECUTE_COMMAND",
            Details::new()
                .with("command", json!(command))
                .with("argv", json!(null))
                .with("shell", json!("auto"))
                .with("cwd", json!("/home/alice/autogpt-workspace"))
                .with(
                    "env_keys",
                    json!(["HOME", "LANG", "PATH", "PYTHONIOENCODING", "SECRET_TOKEN"]),
                )
                .with("timeout_seconds", json!(30)),
        ),
        record(
            1712345680.0,
            "sess-7f3a",
            None,
            "JAIL_VIOLATION",
            Details::new()
                .with("code", json!("PATH_OUTSIDE_ALLOWED_ROOT"))
                .with("path", json!("../../etc/passwd"))
                .with("attempted_op", json!("FILE_READ")),
        ),
        record(
            f64::from_bits(0x41d9ea00febf4000),
            "sess-7f3a",
            None,
            "TOKEN_REFRESHED",
            Details::new(),
        ),
    ];
    records[1].result = Outcome {
        ok: true,
        exit_code: Some(0),
        duration_ms: 124,
        error_code: None,
    };
    records[2].result = Outcome {
        ok: false,
        exit_code: None,
        duration_ms: 0,
        error_code: Some("PATH_OUTSIDE_ALLOWED_ROOT".into()),
    };
    records
}

const CANONICAL: [&str; 4] = [
    r#"{"details":{"shim_version":"0.0.1-experimental"},"machine_id":"123e4567-e89b-12d3-a456-426614174000","op":"SHIM_START","prev_hmac":null,"request_id":null,"result":{"duration_ms":0,"error_code":null,"exit_code":null,"ok":true},"seq":1,"session_id":"-","shim_version":"0.0.1-experimental","ts":1712345678.123}"#,
    "{\"details\":{\"argv\":null,\"command\":\"echo \\\"café\\\"\\tdone\\nls C:\\\\tmp\\u0001 \u{1f600}\",\"cwd\":\"/home/alice/autogpt-workspace\",\"env_keys\":[\"HOME\",\"LANG\",\"PATH\",\"PYTHONIOENCODING\",\"SECRET_TOKEN\"],\"shell\":\"auto\",\"timeout_seconds\":30},\"machine_id\":\"123e4567-e89b-12d3-a456-426614174000\",\"op\":\"EXECUTE_COMMAND\",\"prev_hmac\":\"9539767e5fbec98a085f52be2df847f7d54c09915869817bebdf36464b0fa9bd\",\"request_id\":\"msg-0001\",\"result\":{\"duration_ms\":124,\"error_code\":null,\"exit_code\":0,\"ok\":true},\"seq\":2,\"session_id\":\"sess-7f3a\",\"shim_version\":\"0.0.1-experimental\",\"ts\":1712345679.5}",
    r#"{"details":{"attempted_op":"FILE_READ","code":"PATH_OUTSIDE_ALLOWED_ROOT","path":"../../etc/passwd"},"machine_id":"123e4567-e89b-12d3-a456-426614174000","op":"JAIL_VIOLATION","prev_hmac":"9a0475100fa530c67ed638b0e161fae5af1756b0494bedb0d28cf51edc5a4507","request_id":null,"result":{"duration_ms":0,"error_code":"PATH_OUTSIDE_ALLOWED_ROOT","exit_code":null,"ok":false},"seq":3,"session_id":"sess-7f3a","shim_version":"0.0.1-experimental","ts":1712345680.0}"#,
    r#"{"details":{},"machine_id":"123e4567-e89b-12d3-a456-426614174000","op":"TOKEN_REFRESHED","prev_hmac":"cfc9599a3fe667aa0b8562f5a536f3e1ca6c30f8cad57af12635753dabe30c05","request_id":null,"result":{"duration_ms":0,"error_code":null,"exit_code":null,"ok":true},"seq":4,"session_id":"sess-7f3a","shim_version":"0.0.1-experimental","ts":1739064314.9882812}"#,
];

const HMACS: [&str; 4] = [
    "9539767e5fbec98a085f52be2df847f7d54c09915869817bebdf36464b0fa9bd",
    "9a0475100fa530c67ed638b0e161fae5af1756b0494bedb0d28cf51edc5a4507",
    "cfc9599a3fe667aa0b8562f5a536f3e1ca6c30f8cad57af12635753dabe30c05",
    "578e53c9c0ba8565c639e2d4fababb543d111192af3777ba8b7d3d32f2fae022",
];

#[test]
fn worked_example_records_have_the_specified_canonical_bytes_hmacs_and_file() {
    let key = key();
    let mut prev = None;
    let mut file = Vec::new();
    let lengths = [307, 559, 455, 351];
    for (i, mut rec) in worked_example().into_iter().enumerate() {
        rec.seq = i as u64 + 1;
        rec.prev_hmac = prev.clone();
        let canonical = rec.canonical().unwrap();
        assert_eq!(canonical, CANONICAL[i], "record {}", i + 1);
        assert_eq!(canonical.len(), lengths[i]);
        let sealed = rec.seal(&key).unwrap();
        assert_eq!(sealed.hmac, HMACS[i], "record {}", i + 1);
        file.extend_from_slice(sealed.line.as_bytes());
        file.push(b'\n');
        prev = Some(sealed.hmac);
    }
    assert_eq!(file.len(), 2105);
    assert_eq!(
        hex(&Sha256::digest(&file)),
        "7fc43a2ee52029b051bcc0d5659cca40a331301bc83cf0d79e8f08756f68df2b"
    );
    let committed = std::fs::read(vectors().join("spec-12/audit.log")).unwrap();
    assert_eq!(file, committed);
    assert!(verify_bytes(&file, &key).is_empty());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn vectors() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/audit-vectors"))
}

fn read_key(name: &str) -> AuditKey {
    let text = std::fs::read_to_string(vectors().join(name)).unwrap();
    let text = text.trim();
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect();
    AuditKey::new(bytes).unwrap()
}

#[test]
fn every_tamper_vector_verifies_as_expected() {
    let dir = vectors().join("tamper");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 18, "vectors missing: {cases:?}");
    for case in cases {
        let name = case.file_stem().unwrap().to_str().unwrap();
        let key_name = std::fs::read_to_string(dir.join(format!("{name}.key"))).unwrap();
        let key = read_key(key_name.trim());
        let expected = std::fs::read_to_string(dir.join(format!("{name}.expected"))).unwrap();
        let got: Vec<String> = verify_bytes(&std::fs::read(&case).unwrap(), &key)
            .iter()
            .map(|v| v.to_string())
            .collect();
        let want: Vec<&str> = expected.lines().collect();
        assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
        for (g, w) in got.iter().zip(&want) {
            match w.strip_suffix('*') {
                Some(prefix) => assert!(g.starts_with(prefix), "{name}: {g} vs {w}"),
                None => assert_eq!(g, w, "{name}"),
            }
        }
    }
}

/// xorshift64*: a fixed, reproducible sequence of bit patterns.
fn bit_patterns(n: usize) -> Vec<u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let x = f64::from_bits(bits);
        if x.is_finite() {
            out.push(bits);
        }
        // Also realistic timestamps with microsecond resolution.
        let micros = 1_700_000_000_000_000u64 + (bits % 100_000_000_000_000);
        out.push((micros as f64 / 1e6).to_bits());
    }
    out.truncate(n);
    out
}

#[test]
fn float_repr_matches_python_for_100000_values() {
    let bits = bit_patterns(100_000);
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, struct\n\
             out = []\n\
             for line in sys.stdin:\n\
             \x20   out.append(repr(struct.unpack('<d', bytes.fromhex(line.strip()))[0]))\n\
             sys.stdout.write('\\n'.join(out) + '\\n')\n",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is required for this test (an independent float formatter)");
    {
        let mut stdin = child.stdin.take().unwrap();
        let mut input = String::with_capacity(bits.len() * 17);
        for b in &bits {
            input.push_str(&hex(&b.to_le_bytes()));
            input.push('\n');
        }
        stdin.write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let python: Vec<&str> = text.lines().collect();
    assert_eq!(python.len(), bits.len());
    let mut mismatches = Vec::new();
    for (b, want) in bits.iter().zip(python) {
        let got = repr_f64(f64::from_bits(*b)).unwrap();
        if got != want {
            mismatches.push(format!("{b:016x}: ours {got} python {want}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches: {:#?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(10)]
    );
}

// ---- every single-byte change, deletion, reordering and truncation is caught --------------

fn spec_file() -> Vec<u8> {
    std::fs::read(vectors().join("spec-12/audit.log")).unwrap()
}

/// True when the line holding byte `pos` parses to the same JSON value in
/// both files.
fn same_content(a: &[u8], b: &[u8], pos: usize) -> bool {
    let record = record_of(a, pos) as usize - 1;
    let line = |f: &[u8]| -> Option<serde_json::Value> {
        serde_json::from_slice(f.split(|&c| c == b'\n').nth(record)?).ok()
    };
    matches!((line(a), line(b)), (Some(x), Some(y)) if x == y)
}

/// The 1-based record (line) that byte `pos` belongs to.
fn record_of(file: &[u8], pos: usize) -> i128 {
    1 + file[..pos].iter().filter(|&&b| b == b'\n').count() as i128
}

#[test]
fn changing_any_byte_fails_verification_at_that_record() {
    let file = spec_file();
    let key = key();
    for pos in 0..file.len() {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut copy = file.clone();
            copy[pos] ^= flip;
            let violations = verify_bytes(&copy, &key);
            if violations.is_empty() && same_content(&file, &copy, pos) {
                // The text changed but not the value it spells (e.g. a float
                // digit beyond f64 precision): the HMAC covers values.
                continue;
            }
            assert!(
                !violations.is_empty(),
                "byte {pos} ^ {flip:#x} went unnoticed"
            );
            let first = &violations[0];
            if copy[pos] == b'\n' || file[pos] == b'\n' || first.seq.is_none() {
                // A changed line break or an unparseable line: the damage is
                // reported without a trustworthy seq.
                continue;
            }
            let record = record_of(&file, pos);
            // The damaged record is reported under the seq it now claims
            // (a changed seq digit changes that too), or the next record
            // reports the broken chain.
            let line = copy
                .split(|&b| b == b'\n')
                .nth(record as usize - 1)
                .unwrap();
            let claimed = serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v["seq"].as_i64())
                .map(i128::from);
            assert!(
                first.seq == claimed || first.seq == Some(record) || first.seq == Some(record + 1),
                "byte {pos} (record {record}) ^ {flip:#x}: {violations:?}"
            );
        }
    }
}

#[test]
fn deleting_or_reordering_records_or_truncating_is_caught() {
    let file = spec_file();
    let key = key();
    let lines: Vec<&[u8]> = file.split_inclusive(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), 4);
    for drop in 0..4 {
        let copy: Vec<u8> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != drop)
            .flat_map(|(_, l)| l.iter().copied())
            .collect();
        let violations = verify_bytes(&copy, &key);
        if drop == 3 {
            // Cutting the newest record at a line boundary is invisible to
            // the chain; the tail anchor exists for exactly this (verify).
            assert!(violations.is_empty());
        } else {
            assert!(
                !violations.is_empty(),
                "deleting record {} went unnoticed",
                drop + 1
            );
            assert_eq!(violations[0].seq, Some(drop as i128 + 2));
        }
    }
    for a in 0..3 {
        let mut order: Vec<usize> = (0..4).collect();
        order.swap(a, a + 1);
        let copy: Vec<u8> = order
            .iter()
            .flat_map(|&i| lines[i].iter().copied())
            .collect();
        let violations = verify_bytes(&copy, &key);
        assert!(
            !violations.is_empty(),
            "swapping records {} and {} went unnoticed",
            a + 1,
            a + 2
        );
        assert_eq!(violations[0].seq, Some(a as i128 + 2));
    }
    for cut in 1..file.len() {
        let violations = verify_bytes(&file[..cut], &key);
        if file[cut - 1] == b'\n' {
            continue; // a boundary cut: see above
        }
        assert_eq!(violations[0].kind.as_str(), "truncated", "cut at {cut}");
    }
}

#[test]
fn export_manifest_vector_matches_the_implementation_and_the_log() {
    use autogpt_shim::audit::{ManifestEntry, manifest_json};
    let manifest = std::fs::read_to_string(vectors().join("export/manifest.json")).unwrap();
    let sig = std::fs::read_to_string(vectors().join("export/manifest.sig")).unwrap();
    assert_eq!(manifest.len(), 206);
    assert_eq!(key().hmac_hex(manifest.as_bytes()), sig);
    let log = spec_file();
    let built = manifest_json(
        "2024-04-05T19:41:20.000123+00:00",
        &[ManifestEntry {
            name: "audit.log".into(),
            sha256: hex(&Sha256::digest(&log)),
            size: log.len() as u64,
        }],
    );
    assert_eq!(built, manifest);
}
