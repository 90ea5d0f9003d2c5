//! The audit writer: durable tickets and continuations, group commit under concurrency,
//! session-bound handles, recovery of the chain on restart, rotation and its
//! links, the tail anchor, the writer lock, and survival of `kill -9`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autogpt_shim::audit::{
    Anchor, AuditError, AuditKey, AuditLog, Details, Entry, Outcome, RotateReason, Then,
    WriterOptions, WriterThread, verify_bytes,
};
use serde_json::{Value, json};

fn key() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

fn options(path: &Path) -> WriterOptions {
    let mut o = WriterOptions::new(path.to_owned(), "0.1.0-test");
    o.machine_id = Some("machine-1".into());
    // A fixed stamp exercises the collision counter.
    o.stamp = Arc::new(|_| "20240405-194120".to_owned());
    o
}

fn open(path: &Path) -> (AuditLog, WriterThread) {
    open_with(options(path), key)
}

/// Opens a log that an earlier writer of the same test has closed. The
/// writer lock is gone with the last descriptor of the lock file; other tests
/// of this binary start processes, and a forked child holds a copy of every
/// descriptor until it execs, so the lock may be released a moment late —
/// but it must be released.
fn open_with(options: WriterOptions, key: impl Fn() -> AuditKey) -> (AuditLog, WriterThread) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match AuditLog::open(options.clone(), key()) {
            Err(AuditError::Locked(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened.unwrap(),
        }
    }
}

fn close(log: AuditLog, thread: WriterThread) {
    drop(log);
    thread.join();
}

fn entry(op: &str, i: u64) -> Entry {
    Entry {
        op: op.into(),
        request_id: Some(format!("req-{i}")),
        details: Details::new().with("i", json!(i)),
        result: Outcome::default(),
        session_id: None,
    }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn assert_clean(path: &Path) {
    let violations = verify_bytes(&std::fs::read(path).unwrap(), &key());
    assert!(violations.is_empty(), "{}: {violations:?}", path.display());
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logs").join("audit.log");
    (dir, path)
}

#[test]
fn concurrent_writers_produce_a_gap_free_verifiable_chain() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    std::thread::scope(|s| {
        for t in 0..10u64 {
            let log = log.clone();
            s.spawn(move || {
                for i in 0..200u64 {
                    let durable = log.write(entry("FILE_STAT", t * 1000 + i)).unwrap();
                    assert!(durable.seq >= 1);
                }
            });
        }
    });
    close(log, thread);
    let recs = records(&path);
    assert_eq!(recs.len(), 2000);
    let seqs: Vec<u64> = recs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=2000).collect::<Vec<_>>());
    let mut ts = 0.0;
    for r in &recs {
        let t = r["ts"].as_f64().unwrap();
        assert!(t >= ts, "ts went backwards");
        ts = t;
        assert_eq!(r["machine_id"], "machine-1");
        assert_eq!(r["session_id"], "-");
    }
    assert_clean(&path);
}

#[test]
fn tickets_report_the_durable_seq_and_hmac() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let t1 = log.submit(entry("A", 1));
    let t2 = log.submit(entry("B", 2));
    let d1 = t1.wait().unwrap();
    let d2 = t2.wait().unwrap();
    close(log, thread);
    let recs = records(&path);
    assert_eq!((d1.seq, d2.seq), (1, 2));
    assert_eq!(recs[0]["hmac"], d1.hmac.as_str());
    assert_eq!(recs[1]["prev_hmac"], d1.hmac.as_str());
    assert_eq!(recs[1]["hmac"], d2.hmac.as_str());
}

#[test]
fn a_continuation_runs_only_once_its_record_is_in_the_file() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (log, tx, path) = (log.clone(), tx.clone(), path.clone());
            s.spawn(move || {
                for i in 0..50u64 {
                    let (tx, path) = (tx.clone(), path.clone());
                    let id = t * 1000 + i;
                    log.submit_then(
                        entry("FILE_STAT", id),
                        Then::new(move |durable| {
                            // Read on the writer's thread as it runs this:
                            // the record must already be there.
                            let durable = durable.unwrap();
                            let on_disk = records(&path).into_iter().any(|r| {
                                r["request_id"] == format!("req-{id}")
                                    && r["seq"] == durable.seq
                                    && r["hmac"] == durable.hmac.as_str()
                            });
                            tx.send((id, on_disk)).unwrap();
                        }),
                    );
                }
            });
        }
    });
    drop(tx);
    let mut seen: Vec<(u64, bool)> = rx.iter().collect();
    seen.sort_unstable();
    assert_eq!(seen.len(), 200);
    assert!(seen.iter().all(|(_, on_disk)| *on_disk), "{seen:?}");
    close(log, thread);
    assert_clean(&path);
}

#[test]
fn a_continuation_dropped_unrun_learns_that_the_writer_is_gone() {
    let (tx, rx) = std::sync::mpsc::channel();
    drop(Then::new(move |result| tx.send(result).unwrap()));
    assert_eq!(rx.try_recv().unwrap(), Err(AuditError::Closed));
}

#[test]
fn a_continuation_for_another_session_learns_the_refusal_at_once() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let one = log.bind("session-1").unwrap();
    let mut crossing = entry("FILE_READ", 0);
    crossing.session_id = Some("session-2".into());
    let (tx, rx) = std::sync::mpsc::channel();
    one.submit_then(crossing, Then::new(move |result| tx.send(result).unwrap()));
    assert_eq!(rx.try_recv().unwrap(), Err(AuditError::CrossSession));
    drop(one);
    close(log, thread);
    assert!(records(&path).iter().all(|r| r["request_id"] != "req-0"));
}

#[test]
fn session_handles_stamp_their_session_and_refuse_another() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let one = log.bind("session-1").unwrap();
    let two = log.bind("session-2").unwrap();
    assert_eq!(log.bind("").unwrap_err(), AuditError::EmptySession);
    std::thread::scope(|s| {
        for (h, n) in [(&one, 1u64), (&two, 2u64)] {
            s.spawn(move || {
                for i in 0..100 {
                    h.write(entry("FILE_READ", n * 1000 + i)).unwrap();
                }
            });
        }
    });
    let mut crossing = entry("FILE_READ", 0);
    crossing.session_id = Some("session-2".into());
    assert_eq!(one.write(crossing).unwrap_err(), AuditError::CrossSession);
    drop((one, two));
    close(log, thread);
    let recs = records(&path);
    assert_eq!(recs.len(), 200);
    let sessions: BTreeSet<String> = recs
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        sessions,
        BTreeSet::from(["session-1".into(), "session-2".into()])
    );
    for r in &recs {
        let i = r["details"]["i"].as_u64().unwrap();
        let want = if i < 2000 { "session-1" } else { "session-2" };
        assert_eq!(r["session_id"], want);
    }
    assert_clean(&path);
}

#[test]
fn a_restarted_writer_continues_the_chain() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    for i in 0..3 {
        log.write(entry("X", i)).unwrap();
    }
    close(log, thread);
    let (log, thread) = open(&path);
    for i in 3..5 {
        log.write(entry("X", i)).unwrap();
    }
    close(log, thread);
    let seqs: Vec<u64> = records(&path)
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_clean(&path);
}

fn rotated_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("audit.log.2")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_torn_last_line_is_rotated_away_and_a_new_chain_starts() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let mut last = None;
    for i in 0..3 {
        last = Some(log.write(entry("X", i)).unwrap());
    }
    close(log, thread);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"ts\": 17123")
        .unwrap();
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut o = options(&path);
    let sink = warnings.clone();
    o.warn = Arc::new(move |w| sink.lock().unwrap().push(w.to_owned()));
    let (log, thread) = open_with(o, key);
    log.write(entry("Y", 9)).unwrap();
    close(log, thread);
    let rotated = rotated_files(path.parent().unwrap());
    assert_eq!(rotated.len(), 1);
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("set aside unchanged"), "{warnings:?}");
    let torn = verify_bytes(&std::fs::read(&rotated[0]).unwrap(), &key());
    assert_eq!(torn[0].kind.as_str(), "truncated");
    let recs = records(&path);
    assert_eq!(recs[0]["op"], "AUDIT_ROTATED");
    assert_eq!(recs[0]["seq"], 1);
    assert_eq!(recs[0]["details"]["reason"], "recovery");
    assert_eq!(recs[0]["details"]["previous_last_seq"], 3);
    assert_eq!(
        recs[0]["details"]["previous_last_hmac"],
        last.unwrap().hmac.as_str()
    );
    assert_eq!(recs[1]["seq"], 2);
    assert_clean(&path);
}

#[test]
fn a_log_the_key_does_not_verify_is_never_appended_to() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    log.write(entry("X", 1)).unwrap();
    close(log, thread);
    let before = std::fs::read(&path).unwrap();
    let other = || AuditKey::new(vec![7u8; 32]).unwrap();
    let (log, thread) = open_with(options(&path), other);
    log.write(entry("Y", 2)).unwrap();
    close(log, thread);
    let rotated = rotated_files(path.parent().unwrap());
    assert_eq!(rotated.len(), 1);
    assert_eq!(std::fs::read(&rotated[0]).unwrap(), before);
    assert_eq!(records(&path)[0]["details"]["reason"], "recovery");
}

#[test]
fn size_rotation_links_files_and_never_overwrites_a_rotated_file() {
    let (_d, path) = tmp();
    let mut o = options(&path);
    o.rotate_at_bytes = 2000;
    let (log, thread) = open_with(o, key);
    for i in 0..40 {
        log.write(entry("X", i)).unwrap();
    }
    close(log, thread);
    let dir = path.parent().unwrap();
    let rotated = rotated_files(dir);
    assert!(rotated.len() >= 3, "{rotated:?}");
    // Same stamp every time: the counter makes every name unique.
    let names: Vec<String> = rotated
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"audit.log.20240405-194120".to_owned()));
    assert!(names.contains(&"audit.log.20240405-194120-1".to_owned()));
    let mut all = rotated.clone();
    all.push(path.clone());
    let mut total = 0;
    for file in &all {
        assert_clean(file);
        let recs = records(file);
        total += recs.iter().filter(|r| r["op"] == "X").count();
        if recs[0]["op"] == "AUDIT_ROTATED" {
            assert_eq!(recs[0]["details"]["reason"], "size");
            let prev = dir.join(recs[0]["details"]["previous_file"].as_str().unwrap());
            let prev_recs = records(&prev);
            let last = prev_recs.last().unwrap();
            assert_eq!(recs[0]["details"]["previous_last_seq"], last["seq"]);
            assert_eq!(recs[0]["details"]["previous_last_hmac"], last["hmac"]);
        }
    }
    assert_eq!(total, 40);
}

#[test]
fn explicit_rotation_of_an_empty_log_does_nothing() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    assert_eq!(log.rotate(RotateReason::Explicit).unwrap(), None);
    log.write(entry("X", 1)).unwrap();
    let rotated = log.rotate(RotateReason::Explicit).unwrap().unwrap();
    close(log, thread);
    assert!(rotated.exists());
    assert_eq!(records(&path)[0]["details"]["reason"], "explicit");
}

#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_lock() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    match AuditLog::open(options(&path), key()) {
        Err(AuditError::Locked(lock)) => assert!(lock.ends_with(".audit.log.lock")),
        other => panic!("{other:?}"),
    }
    close(log, thread);
    let (log, thread) = open(&path);
    close(log, thread);
}

#[test]
fn files_are_private_and_loose_permissions_are_tightened() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    log.write(entry("X", 1)).unwrap();
    close(log, thread);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut o = options(&path);
    let sink = warnings.clone();
    o.warn = Arc::new(move |w| sink.lock().unwrap().push(w.to_owned()));
    let (log, thread) = open_with(o, key);
    close(log, thread);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(warnings.lock().unwrap().len(), 1);
}

#[test]
fn the_tail_anchor_names_the_last_durable_record() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    let mut last = None;
    for i in 0..5 {
        last = Some(log.write(entry("X", i)).unwrap());
    }
    close(log, thread);
    let text = std::fs::read_to_string(path.with_file_name("audit.log.anchor")).unwrap();
    let anchor = Anchor::parse(&text, &key()).unwrap();
    let last = last.unwrap();
    assert_eq!(anchor.file, "audit.log");
    assert_eq!(anchor.seq, last.seq);
    assert_eq!(anchor.hmac, last.hmac);
    assert!(Anchor::parse(&text.replace("\"seq\":5", "\"seq\":4"), &key()).is_err());
    assert!(Anchor::parse(&text, &AuditKey::new(vec![1; 32]).unwrap()).is_err());
}

#[test]
fn the_previous_anchor_stays_whole_as_the_spare_the_next_is_written_into() {
    let (_d, path) = tmp();
    let (log, thread) = open(&path);
    // Crosses seq 9 → 10, where the line gains a digit (the slow path).
    for i in 0..25 {
        log.write(entry("X", i)).unwrap();
    }
    close(log, thread);
    let anchor_path = path.with_file_name("audit.log.anchor");
    let spare_path = path.with_file_name(".audit.log.anchor.tmp");
    let anchor = Anchor::parse(&std::fs::read_to_string(&anchor_path).unwrap(), &key()).unwrap();
    let spare = Anchor::parse(&std::fs::read_to_string(&spare_path).unwrap(), &key()).unwrap();
    let last = records(&path).last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(anchor.seq, last);
    assert!(spare.seq < anchor.seq, "{} {}", spare.seq, anchor.seq);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for file in [&anchor_path, &spare_path] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
}

#[test]
fn a_spare_anchor_that_is_a_link_is_replaced_never_written_through() {
    let (d, path) = tmp();
    let (log, thread) = open(&path);
    for i in 0..3 {
        log.write(entry("X", i)).unwrap();
    }
    close(log, thread);
    let spare_path = path.with_file_name(".audit.log.anchor.tmp");
    let length = std::fs::metadata(path.with_file_name("audit.log.anchor"))
        .unwrap()
        .len() as usize;
    // A file of exactly the anchor's length, hard-linked as the spare, and
    // another one behind a symbolic link: neither may be written.
    let victim = d.path().join("victim");
    std::fs::write(&victim, vec![b'v'; length]).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let _ = std::fs::remove_file(&spare_path);
    std::fs::hard_link(&victim, &spare_path).unwrap();
    let (log, thread) = open(&path);
    log.write(entry("X", 3)).unwrap();
    close(log, thread);
    assert_eq!(std::fs::read(&victim).unwrap(), vec![b'v'; length]);

    std::fs::remove_file(&spare_path).unwrap();
    std::os::unix::fs::symlink(&victim, &spare_path).unwrap();
    let (log, thread) = open(&path);
    log.write(entry("X", 4)).unwrap();
    close(log, thread);
    assert_eq!(std::fs::read(&victim).unwrap(), vec![b'v'; length]);
    let text = std::fs::read_to_string(path.with_file_name("audit.log.anchor")).unwrap();
    let last = records(&path).last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(Anchor::parse(&text, &key()).unwrap().seq, last);
    assert_clean(&path);
}

#[test]
fn a_failed_write_refuses_every_later_record() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        // A private mount point: a shared (1777) log directory is refused.
        .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("cannot mount a small tmpfs here (needs root); write-failure test not run");
        return;
    }
    let path = mnt.join("audit.log");
    let (log, thread) = open(&path);
    let mut failed = None;
    for i in 0..10_000 {
        let mut e = entry("X", i);
        e.details = Details::new().with("pad", json!("x".repeat(1000)));
        if let Err(err) = log.write(e) {
            failed = Some(err);
            break;
        }
    }
    let failed = failed.expect("a 64 KiB filesystem must fill up");
    assert!(matches!(failed, AuditError::WriteFailed(_)), "{failed:?}");
    assert!(!log.is_healthy());
    assert!(matches!(
        log.write(entry("Y", 0)).unwrap_err(),
        AuditError::Unhealthy(_)
    ));
    let (tx, rx) = std::sync::mpsc::channel();
    log.submit_then(
        entry("Z", 0),
        Then::new(move |result| tx.send(result).unwrap()),
    );
    assert!(matches!(
        rx.try_recv().unwrap(),
        Err(AuditError::Unhealthy(_))
    ));
    close(log, thread);
    let _ = Command::new("umount").arg(&mnt).status();
}

// ---- kill -9 ------------------------------------------------------------------------------------

/// Run in a child process by `kill_9_loses_no_acknowledged_record`: writes
/// from ten threads as fast as it can and prints every completed ticket.
#[test]
#[ignore = "helper process for kill_9_loses_no_acknowledged_record"]
fn kill_9_child_writer() {
    let Some(path) = std::env::var_os("AUDIT_KILL_CHILD_LOG") else {
        return;
    };
    let (log, _thread) = open(Path::new(&path));
    let out = Arc::new(Mutex::new(std::io::stdout()));
    std::thread::scope(|s| {
        for t in 0..10u64 {
            let (log, out) = (log.clone(), out.clone());
            s.spawn(move || {
                for i in 0.. {
                    let d = log.write(entry("FILE_WRITE", t * 1_000_000 + i)).unwrap();
                    let mut o = out.lock().unwrap();
                    writeln!(o, "{} {}", d.seq, d.hmac).unwrap();
                    o.flush().unwrap();
                }
            });
        }
    });
}

#[test]
fn kill_9_loses_no_acknowledged_record() {
    let (_d, path) = tmp();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill_9_child_writer",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("AUDIT_KILL_CHILD_LOG", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some((seq, hmac)) = line.split_once(' ') {
                if let Ok(seq) = seq.parse::<u64>() {
                    acked.push((seq, hmac.to_owned()));
                }
            }
        }
        acked
    });
    std::thread::sleep(Duration::from_millis(1500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = child.wait();
    let acked = reader.join().unwrap();
    assert!(acked.len() > 100, "the child barely wrote: {}", acked.len());

    // The log verifies up to its last complete record: at worst the final
    // line is torn.
    let bytes = std::fs::read(&path).unwrap();
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let complete = &bytes[..end];
    let violations = verify_bytes(complete, &key());
    assert!(violations.is_empty(), "{violations:?}");
    let on_disk: std::collections::HashMap<u64, String> = std::str::from_utf8(complete)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["seq"].as_u64().unwrap(),
                v["hmac"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (seq, hmac) in &acked {
        assert_eq!(
            on_disk.get(seq),
            Some(hmac),
            "acknowledged record {seq} missing"
        );
    }
    eprintln!(
        "kill -9: {} acknowledged, {} on disk, all present",
        acked.len(),
        on_disk.len()
    );

    // A new writer resumes (or, if the tail is torn, rotates it away).
    let (log, thread) = open(&path);
    log.write(entry("AFTER", 0)).unwrap();
    close(log, thread);
    assert_clean(&path);
}

#[test]
fn a_log_path_that_is_no_regular_file_is_refused_and_nothing_is_created_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    std::fs::create_dir(&path).unwrap();
    let Err(err) = AuditLog::open(options(&path), key()) else {
        panic!("a directory is no audit log");
    };
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn a_configured_directory_keeps_its_mode_and_only_the_log_is_tightened() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o750)).unwrap();
    let path = logs.join("audit.log");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (log, thread) = open(&path);
    close(log, thread);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&logs), 0o750);
    assert_eq!(mode(&path), 0o600);
    // The shim's own per-OS directory is tightened.
    let mut own = options(&path);
    own.own_directory = true;
    let (log, thread) = open_with(own, key);
    close(log, thread);
    assert_eq!(mode(&logs), 0o700);
}

#[test]
fn inspecting_the_location_creates_nothing_and_judges_an_existing_log() {
    use autogpt_shim::audit::{Location, inspect_location};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/audit.log");
    assert_eq!(
        inspect_location(&path, false).unwrap(),
        Location::NewDirectory(dir.path().to_owned())
    );
    assert!(!dir.path().join("a").exists());

    let (log, thread) = open(&path);
    log.write(Entry::event("SHIM_START", Details::new()))
        .unwrap();
    drop(log);
    thread.join();
    assert_eq!(inspect_location(&path, false).unwrap(), Location::Existing);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(inspect_location(&path, false).unwrap(), Location::NewFile);

    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let why = inspect_location(&path, false).unwrap_err();
    assert!(
        why.contains("accessible to other users (mode 644)"),
        "{why}"
    );
    // Nothing was tightened: doctor only reports.
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );

    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let why = inspect_location(&shared.join("audit.log"), false).unwrap_err();
    assert!(why.contains("writable by every user"), "{why}");
}
