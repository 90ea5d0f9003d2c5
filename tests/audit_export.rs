//! The export bundle at library level (AUDIT.md §11.4, §12.6): the manifest
//! and signature vector byte for byte, the ZIP container as Python's
//! `zipfile` (and `unzip`, where installed) reads it, and the ZIP64 records
//! — forced on a small archive, and needed for more than 65,535 entries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use autogpt_shim::audit::{
    AuditKey, Crc32, ExportOptions, ManifestEntry, ZipWriter, export, manifest_json,
};
use autogpt_shim::timefmt::Civil;

const SPEC_MANIFEST: &str = r#"{"exported_at": "2024-04-05T19:41:20.000123+00:00", "files": [{"name": "audit.log", "sha256": "7fc43a2ee52029b051bcc0d5659cca40a331301bc83cf0d79e8f08756f68df2b", "size": 2105}], "key_username": "audit_key"}"#;
const SPEC_SIGNATURE: &str = "dd8793cc743f87fa8b8a173f3a10e1db0251b3839b63fdacdea66611bb64281a";

fn key() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

fn spec_log() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("audit-vectors/spec-12/audit.log")
}

fn options(force_zip64: bool) -> ExportOptions {
    ExportOptions {
        exported_at: "2024-04-05T19:41:20.000123+00:00".into(),
        modified: Civil {
            year: 2024,
            month: 4,
            day: 5,
            hour: 21,
            minute: 41,
            second: 20,
            micros: 0,
        },
        force_zip64,
    }
}

/// `python3 -m zipfile -t`, then the entries as (name, size, CRC, bytes)
/// through `zipfile`.
fn python_read(archive: &Path) -> Vec<(String, u64, u32, Vec<u8>)> {
    let test = Command::new("python3")
        .args(["-m", "zipfile", "-t"])
        .arg(archive)
        .output()
        .expect("python3 runs");
    assert!(test.status.success(), "{test:?}");
    let script = "import sys, zipfile, json\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  print(json.dumps([[i.filename, i.file_size, i.CRC, z.read(i).hex()] for i in z.infolist()]))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let list: Vec<(String, u64, u32, String)> = serde_json::from_slice(&out.stdout).unwrap();
    list.into_iter()
        .map(|(name, size, crc, hex)| {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name, size, crc, bytes)
        })
        .collect()
}

/// `unzip -t`, when `unzip` is installed.
fn unzip_test(archive: &Path) {
    let Ok(out) = Command::new("unzip").arg("-t").arg(archive).output() else {
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No errors detected"), "{text}");
}

#[test]
fn manifest_of_the_specification_example_is_byte_exact() {
    let files = [ManifestEntry {
        name: "audit.log".into(),
        sha256: "7fc43a2ee52029b051bcc0d5659cca40a331301bc83cf0d79e8f08756f68df2b".into(),
        size: 2105,
    }];
    let manifest = manifest_json("2024-04-05T19:41:20.000123+00:00", &files);
    assert_eq!(manifest, SPEC_MANIFEST);
    assert_eq!(manifest.len(), 206);
    assert_eq!(key().hmac_hex(manifest.as_bytes()), SPEC_SIGNATURE);
}

#[test]
fn manifest_escapes_non_ascii_names_like_python() {
    let files = [ManifestEntry {
        name: "jöurnal\u{1F600}.log".into(),
        sha256: "00".into(),
        size: 0,
    }];
    let manifest = manifest_json("t", &files);
    assert_eq!(
        manifest,
        r#"{"exported_at": "t", "files": [{"name": "j\u00f6urnal\ud83d\ude00.log", "sha256": "00", "size": 0}], "key_username": "audit_key"}"#
    );
    assert!(manifest.is_ascii());
}

#[test]
fn export_of_the_specification_file_reproduces_the_vector() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle.zip");
    let done = export(&[spec_log()], &out, &key(), &options(false)).unwrap();
    assert_eq!(done.signature, SPEC_SIGNATURE);
    assert_eq!(done.files.len(), 1);
    let entries = python_read(&out);
    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["audit.log", "manifest.json", "manifest.sig"]);
    assert_eq!(entries[0].3, fs::read(spec_log()).unwrap());
    assert_eq!(entries[0].2, Crc32::of(&entries[0].3));
    assert_eq!(entries[1].3, SPEC_MANIFEST.as_bytes());
    assert_eq!(entries[2].3, SPEC_SIGNATURE.as_bytes());
    unzip_test(&out);
}

#[test]
fn export_refuses_to_replace_an_existing_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle.zip");
    fs::write(&out, b"keep").unwrap();
    let err = export(&[spec_log()], &out, &key(), &options(false)).unwrap_err();
    assert!(
        matches!(err, autogpt_shim::audit::AuditError::OutputExists(_)),
        "{err:?}"
    );
    assert_eq!(fs::read(&out).unwrap(), b"keep");
    assert_eq!(
        fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "no temporary left"
    );
}

#[test]
fn forced_zip64_records_are_read_back_by_python_and_unzip() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bundle64.zip");
    let done = export(&[spec_log()], &out, &key(), &options(true)).unwrap();
    assert_eq!(done.signature, SPEC_SIGNATURE);
    let bytes = fs::read(&out).unwrap();
    // The ZIP64 end record and its locator are there, and the classic end
    // record points at them with its "see ZIP64" markers.
    let find = |sig: &[u8]| bytes.windows(4).any(|w| w == sig);
    assert!(find(&[0x50, 0x4b, 0x06, 0x06]), "ZIP64 end record");
    assert!(find(&[0x50, 0x4b, 0x06, 0x07]), "ZIP64 locator");
    assert_eq!(&bytes[bytes.len() - 12..bytes.len() - 2], &[0xff; 10]);
    let entries = python_read(&out);
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].1, 2105);
    assert_eq!(entries[0].3, fs::read(spec_log()).unwrap());
    assert_eq!(entries[1].3, SPEC_MANIFEST.as_bytes());
    unzip_test(&out);
}

#[test]
fn more_than_65535_entries_switch_to_zip64_end_records() {
    let count = 65_537usize;
    let civil = options(false).modified;
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()), &civil);
    for i in 0..count {
        let data = format!("{i}\n");
        zip.add(&format!("f{i}"), &mut data.as_bytes(), data.len() as u64)
            .unwrap();
    }
    let bytes = zip.finish().unwrap().into_inner();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("many.zip");
    fs::write(&out, &bytes).unwrap();
    let script = "import sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  names = z.namelist()\n\
                  assert len(names) == int(sys.argv[2]), len(names)\n\
                  assert z.read(names[-1]) == (str(len(names) - 1) + '\\n').encode()\n\
                  assert z.testzip() is None\n\
                  print('ok')";
    let result = Command::new("python3")
        .args(["-c", script])
        .arg(&out)
        .arg(count.to_string())
        .output()
        .unwrap();
    assert!(result.status.success(), "{result:?}");
    assert!(bytes.windows(4).any(|w| w == [0x50, 0x4b, 0x06, 0x06]));
}

#[test]
fn non_ascii_entry_names_carry_the_utf8_flag() {
    let civil = options(false).modified;
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()), &civil);
    zip.add("jöurnal.log", &mut &b"x\n"[..], 2).unwrap();
    let bytes = zip.finish().unwrap().into_inner();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("utf8.zip");
    fs::write(&out, &bytes).unwrap();
    let entries = python_read(&out);
    assert_eq!(entries[0].0, "jöurnal.log");
    assert_eq!(entries[0].3, b"x\n");
}

#[test]
fn export_reports_progress_up_to_the_total_size_of_the_logs() {
    let tmp = tempfile::tempdir().unwrap();
    let second = tmp.path().join("audit.log.20240101-000000");
    fs::copy(spec_log(), &second).unwrap();
    let total = fs::metadata(spec_log()).unwrap().len() * 2;
    let mut seen = Vec::new();
    let out = tmp.path().join("bundle.zip");
    autogpt_shim::audit::export_with_progress(
        &[spec_log(), second],
        &out,
        &key(),
        &options(false),
        &mut |done, all| seen.push((done, all)),
    )
    .unwrap();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|&(_, all)| all == total));
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "{seen:?}");
    assert_eq!(seen.last().unwrap().0, total);
}
