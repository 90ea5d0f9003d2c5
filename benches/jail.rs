//! Cost of the path jail, with baselines measured in the same run:
//!
//! 1. decide + open + fstat of a nested file through the jail, next to
//!    `realpath` then open-by-path then `fstat` (what a string-checking jail
//!    does), for both enforcement resolvers, and with the shim's own
//!    directories guarded as the daemon does;
//! 2. `FILE_LIST` of a 100,000-entry directory with `max_entries` 1000: time
//!    and peak resident memory, next to reading every name and sorting them.
//!
//! Peak memory is the growth of `VmHWM` after resetting it through
//! `/proc/self/clear_refs`. Run with `cargo bench --bench jail`.

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use autogpt_shim::files::{self, FileContext};
use autogpt_shim::jail::{Jail, JailOptions, ProtectedLocations};
use autogpt_shim::protocol::{FileList, Message};
use rustix::fs::{Mode, OFlags};

fn percentiles(budget: Duration, mut op: impl FnMut()) -> (f64, f64) {
    for _ in 0..1000 {
        op();
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget {
        let t = Instant::now();
        op();
        samples.push(t.elapsed().as_nanos() as f64);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

fn status_kib(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `op` once and returns (seconds, peak RSS growth in KiB).
fn peak(op: impl FnOnce()) -> (f64, u64) {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kib("VmRSS:");
    let t = Instant::now();
    op();
    let secs = t.elapsed().as_secs_f64();
    let hwm = status_kib("VmHWM:");
    if !reset {
        eprintln!("(peak RSS not resettable here; figure is the process peak)");
    }
    (secs, hwm.saturating_sub(before))
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("BENCH_MILLIS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap().join("w");
    let nested = root.join("a/b/c/d/e");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(nested.join("file.txt"), "x").unwrap();
    let wire = format!("{}/a/b/c/d/e/file.txt", root.display());

    println!("jail: resolve + open + fstat of {wire:?}, {budget:?} per measurement");
    let (base50, base99) = percentiles(budget, || {
        let real = std::fs::canonicalize(black_box(Path::new(&wire))).unwrap();
        let fd = rustix::fs::open(&real, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        black_box(rustix::fs::fstat(fd.as_fd()).unwrap());
    });
    println!("  baseline realpath+open+fstat   p50 {base50:>8.0} ns  p99 {base99:>8.0} ns");
    // The shim's own directories as a daemon protects them: three that
    // exist and one not created yet.
    let own = std::fs::canonicalize(tmp.path()).unwrap().join("own");
    for dir in ["config", "state", "secrets"] {
        std::fs::create_dir_all(own.join(dir)).unwrap();
    }
    let locations = ["config", "state", "secrets", "data"].map(|d| ("directory", own.join(d)));
    let protected = ProtectedLocations::resolve(
        locations.iter().map(|(what, dir)| (*what, dir.as_path())),
        &own,
    );
    for (walker, protected) in [
        (false, ProtectedLocations::default()),
        (true, ProtectedLocations::default()),
        (false, protected),
    ] {
        let guarded = if protected.is_empty() { "" } else { "+own" };
        let jail = Jail::pin(
            &root,
            JailOptions {
                force_walker: walker,
                protected,
                ..Default::default()
            },
        )
        .unwrap();
        let (p50, p99) = percentiles(budget, || {
            let d = jail.decide(black_box(&wire)).unwrap();
            let fd = jail
                .open(&d.remainder, OFlags::RDONLY, Mode::empty())
                .unwrap();
            black_box(rustix::fs::fstat(fd.as_fd()).unwrap());
        });
        println!(
            "  jail ({:<11})             p50 {p50:>8.0} ns  p99 {p99:>8.0} ns  ratio p50 {:.2}x",
            format!("{:?}{guarded}", jail.resolver()),
            p50 / base50
        );
    }

    let big = root.join("big");
    std::fs::create_dir(&big).unwrap();
    let n = 100_000;
    for i in 0..n {
        std::fs::File::create(big.join(format!("entry-{:06}", (i * 7919) % n))).unwrap();
    }
    let jail = Jail::pin(&root, JailOptions::default()).unwrap();
    let ctx = FileContext {
        jail: &jail,
        max_file_size_bytes: 10 << 20,
        refuse_multilink_reads: false,
        umask: Mode::from_raw_mode(0o022),
    };
    let req = FileList {
        path: "big".into(),
        glob: None,
        recursive: false,
        include_hidden: false,
        max_entries: 1000,
    };
    // Warm the dentry cache so both sides read from memory.
    let _ = std::fs::read_dir(&big).unwrap().count();
    println!("FILE_LIST of a {n}-entry directory, max_entries 1000");
    let (base_secs, base_kib) = peak(|| {
        let mut names: Vec<String> = std::fs::read_dir(&big)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names.truncate(1000);
        black_box(names);
    });
    println!(
        "  baseline read-all+sort          {:>8.1} ms  peak RSS +{base_kib} KiB",
        base_secs * 1e3
    );
    let (secs, kib) = peak(|| {
        let out = files::list(&ctx, &req);
        match out.reply {
            Ok(Message::FileListResponse(r)) => {
                assert_eq!(r.entries.len(), 1000);
                assert!(r.truncated);
                black_box(r);
            }
            other => panic!("{other:?}"),
        }
    });
    println!(
        "  FILE_LIST (bounded heap)        {:>8.1} ms  peak RSS +{kib} KiB  time ratio {:.2}x",
        secs * 1e3,
        secs / base_secs
    );
}
