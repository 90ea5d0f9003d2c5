//! EXEC.md §7: stdout and stderr share one budget in arrival order, are
//! drained past it without blocking the child, end with the marker and
//! total exactly the budget when truncated, and decode as UTF-8 with
//! U+FFFD replacement.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::time::{Duration, Instant};

use autogpt_shim::exec::{MARKER, TEXT_CAP};
use exec_support::*;

const MARKER_TEXT: &str = "\n[command output truncated]\n";

#[test]
fn fifty_mib_on_each_stream_keeps_exactly_the_budget() {
    let fx = Fx::new();
    let started = Instant::now();
    let out = fx.run(&command(
        "head -c 52428800 /dev/zero | tr '\\0' o & \
         head -c 52428800 /dev/zero | tr '\\0' e >&2; wait",
    ));
    let r = result(&out);
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(!r.timed_out);
    assert_eq!(r.exit_code, 0);
    assert!(r.output_truncated);
    assert_eq!(fx.max_file_size_bytes.min(TEXT_CAP), TEXT_CAP);
    assert_eq!((r.stdout.len() + r.stderr.len()) as u64, TEXT_CAP);
    assert!(r.stderr.ends_with(MARKER_TEXT));
    assert!(r.stdout.bytes().all(|b| b == b'o'));
    let body = &r.stderr[..r.stderr.len() - MARKER.len()];
    assert!(body.bytes().all(|b| b == b'e'));
}

#[test]
fn smaller_max_file_size_is_the_budget_and_stdout_is_trimmed_first() {
    let mut fx = Fx::new();
    fx.max_file_size_bytes = 1024;
    // stdout fills the budget before stderr writes anything.
    let out = fx.run(&command(
        "head -c 100000 /dev/zero | tr '\\0' o; head -c 100000 /dev/zero | tr '\\0' e >&2",
    ));
    let r = result(&out);
    assert!(r.output_truncated);
    assert_eq!(r.stdout, "o".repeat(996));
    assert_eq!(r.stderr, MARKER_TEXT);
}

#[test]
fn budget_below_the_marker_cuts_the_marker() {
    let mut fx = Fx::new();
    fx.max_file_size_bytes = 10;
    let out = fx.run(&command("echo 0123456789abcdef"));
    let r = result(&out);
    assert!(r.output_truncated);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr, &MARKER_TEXT[..10]);
}

#[test]
fn output_within_the_budget_is_untouched() {
    let fx = Fx::new();
    let out = fx.run(&command("printf 'a\\r\\nb'; printf 'err' >&2"));
    let r = result(&out);
    assert!(!r.output_truncated);
    assert_eq!(r.stdout, "a\r\nb");
    assert_eq!(r.stderr, "err");
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let fx = Fx::new();
    let out = fx.run(&command(
        "printf 'A\\377\\376B\\303'; printf '\\342\\202' >&2",
    ));
    let r = result(&out);
    assert_eq!(r.stdout, "A\u{FFFD}\u{FFFD}B\u{FFFD}");
    assert_eq!(r.stderr, "\u{FFFD}");
}

#[test]
fn multibyte_character_cut_by_trimming_is_replaced() {
    let mut fx = Fx::new();
    // 28 bytes of marker leave 3 bytes of stdout: "é" and half of the next.
    fx.max_file_size_bytes = 31;
    let out = fx.run(&command(&format!("printf '{}'", "é".repeat(20))));
    let r = result(&out);
    assert!(r.output_truncated);
    assert_eq!(r.stdout, "é\u{FFFD}");
    assert_eq!(r.stderr, MARKER_TEXT);
}
