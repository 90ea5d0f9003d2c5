//! Audit log throughput, with baselines measured in the same run:
//!
//! 1. one caller writing durable records back to back (every record waits
//!    for its own fdatasync), next to a bare `write` + `fdatasync` of lines
//!    of the same size;
//! 2. ten callers writing concurrently, where records that arrive together
//!    share one sync (group commit);
//! 3. verification of a 1,000,000-record log, next to merely parsing every
//!    line as JSON.
//!
//! CPU time is the whole process's user+system time from /proc/self/stat,
//! divided by the records written. Run with `cargo bench --bench audit`
//! (`BENCH_SECONDS` sets the duration of the write measurements).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use autogpt_shim::audit::{
    AuditKey, AuditLog, Details, Entry, Outcome, Record, WriterOptions, verify_bytes,
};
use serde_json::json;

fn key() -> AuditKey {
    AuditKey::new((0u8..32).collect()).unwrap()
}

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at ')'.
    let after = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn entry(i: u64) -> Entry {
    Entry {
        op: "FILE_STAT".into(),
        request_id: Some(format!("5b0e2d36-0c4c-4a51-9a76-{i:012}")),
        details: Details::new()
            .with("path", json!("/home/alice/projects/site/src/main.rs"))
            .with("follow_symlinks", json!(true)),
        result: Outcome {
            duration_ms: 1,
            ..Outcome::default()
        },
        session_id: Some("session-1".into()),
    }
}

fn writers(threads: u64, seconds: f64) -> (u64, f64, f64) {
    let dir = tempfile::tempdir_in(".").unwrap();
    let mut options = WriterOptions::new(dir.path().join("audit.log"), "bench");
    options.machine_id = Some("123e4567-e89b-12d3-a456-426614174000".into());
    let (log, thread) = AuditLog::open(options, key()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (log, stop, count) = (log.clone(), stop.clone(), count.clone());
            s.spawn(move || {
                let mut i = t << 40;
                while !stop.load(Ordering::Relaxed) {
                    log.write(entry(i)).unwrap();
                    count.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    drop(log);
    thread.join();
    let n = count.load(Ordering::Relaxed);
    (n, n as f64 / elapsed, cpu / n as f64 * 1e6)
}

fn bare_sync_baseline(seconds: f64, line_len: usize) -> f64 {
    let dir = tempfile::tempdir_in(".").unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("plain.log"))
        .unwrap();
    let mut line = vec![b'x'; line_len];
    line.push(b'\n');
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        file.write_all(&line).unwrap();
        rustix::fs::fdatasync(file.as_fd()).unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    let sample = Record {
        ts: 1712345678.123456,
        session_id: "session-1".into(),
        machine_id: "123e4567-e89b-12d3-a456-426614174000".into(),
        shim_version: "bench".into(),
        request_id: Some("5b0e2d36-0c4c-4a51-9a76-000000000001".into()),
        op: "FILE_STAT".into(),
        details: entry(1).details,
        result: entry(1).result,
        seq: 1,
        prev_hmac: Some("0".repeat(64)),
    };
    let line_len = sample.seal(&key()).unwrap().line.len();
    println!(
        "audit writer ({seconds} s per measurement, {line_len}-byte records, in the current directory's filesystem)"
    );
    let bare = bare_sync_baseline(seconds, line_len);
    println!("  baseline write+fdatasync per line     {bare:>10.0} lines/s");
    let (n1, rate1, cpu1) = writers(1, seconds);
    println!(
        "  1 writer, durable per record          {rate1:>10.0} records/s  {cpu1:>7.1} CPU µs/record  ({n1} records; {:.2}x the bare sync rate)",
        rate1 / bare
    );
    let (n10, rate10, cpu10) = writers(10, seconds);
    println!(
        "  10 writers, group commit              {rate10:>10.0} records/s  {cpu10:>7.1} CPU µs/record  ({n10} records; {:.2}x one writer)",
        rate10 / rate1
    );

    // A 1M-record log, sealed in memory (no syncs needed to build it).
    let key = key();
    let mut log = Vec::with_capacity(420 * 1_000_000);
    let mut prev = None;
    for seq in 1..=1_000_000u64 {
        let mut rec = sample.clone();
        rec.seq = seq;
        rec.ts = 1712345678.0 + seq as f64 / 1000.0;
        rec.prev_hmac = prev.take();
        let sealed = rec.seal(&key).unwrap();
        log.extend_from_slice(sealed.line.as_bytes());
        log.push(b'\n');
        prev = Some(sealed.hmac);
    }
    let mb = log.len() as f64 / 1e6;
    let t = Instant::now();
    let parsed = log
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter(|l| serde_json::from_slice::<serde_json::Value>(l).is_ok())
        .count();
    let parse_secs = t.elapsed().as_secs_f64();
    assert_eq!(parsed, 1_000_000);
    let t = Instant::now();
    let violations = verify_bytes(&log, &key);
    let verify_secs = t.elapsed().as_secs_f64();
    assert!(violations.is_empty());
    println!("verify of a 1,000,000-record log ({mb:.0} MB)");
    println!(
        "  baseline JSON parse of every line      {:>10.0} records/s  {:>7.1} MB/s",
        1e6 / parse_secs,
        mb / parse_secs
    );
    println!(
        "  audit verify (canonical form + HMAC)   {:>10.0} records/s  {:>7.1} MB/s  ({:.2}x the parse time)",
        1e6 / verify_secs,
        mb / verify_secs,
        verify_secs / parse_secs
    );
}
