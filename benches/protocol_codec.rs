//! Decode + encode cost of the protocol codec on two representative frames:
//! a 4 KiB `FILE_WRITE` request and a 1 MiB `FILE_CONTENTS` response.
//!
//! The baseline, measured in the same run on the same bytes, is an untyped
//! `serde_json` round trip (parse to `Value`, serialize back) with none of
//! the protocol's checks; the ratio says what strictness and typing cost.
//! Run with `cargo bench --bench protocol_codec`.

// A benchmark that meets a codec failure has nothing to measure: stopping is right.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use autogpt_shim::protocol::{self, Encoding, FileContents, FileWrite, Frame, Message};

/// Runs `op` repeatedly for about `budget` (after a warm-up) and returns the
/// median of several batches, in nanoseconds per operation.
fn measure(budget: Duration, mut op: impl FnMut()) -> f64 {
    let warm = Instant::now();
    let mut per_batch = 0u64;
    while warm.elapsed() < budget / 10 {
        op();
        per_batch += 1;
    }
    let per_batch = (per_batch / 5).max(1);
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || samples.len() < 5 {
        let t = Instant::now();
        for _ in 0..per_batch {
            op();
        }
        samples.push(t.elapsed().as_nanos() as f64 / per_batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn report(name: &str, bytes: usize, codec_ns: f64, baseline_ns: f64) {
    let mbps = |ns: f64| bytes as f64 / ns * 1e9 / 1e6;
    println!(
        "{name:<22} {bytes:>9} B  codec {codec_ns:>12.0} ns/op {:>8.1} MB/s | serde_json::Value baseline {baseline_ns:>12.0} ns/op {:>8.1} MB/s | ratio {:.2}x",
        mbps(codec_ns),
        mbps(baseline_ns),
        codec_ns / baseline_ns
    );
}

fn bench_frame(name: &str, frame: &Frame, budget: Duration) {
    let bytes = protocol::encode(frame).expect("frame encodes");
    let codec = measure(budget, || {
        // A text frame, as the daemon decodes it: its UTF-8 was checked by
        // the WebSocket codec, as `from_str` below assumes too.
        let decoded = protocol::decode_text(black_box(&bytes)).expect("decodes");
        black_box(protocol::encode(&decoded).expect("encodes"));
    });
    let baseline = measure(budget, || {
        let value: serde_json::Value = serde_json::from_str(black_box(&bytes)).expect("json");
        black_box(serde_json::to_string(&value).expect("json"));
    });
    report(name, bytes.len(), codec, baseline);
}

/// Text with the mix of characters a source file has, including some that
/// need JSON escaping (quotes, backslashes, newlines, tabs) and non-ASCII.
fn text_of(len: usize) -> String {
    let pattern = "fn main() {\n\tprintln!(\"héllo, wörld \\\\ {}\", 42);\n}\n";
    pattern.chars().cycle().take(len).collect()
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("BENCH_MILLIS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
    );
    println!("protocol codec: decode + encode, median of batches over {budget:?} each");

    let write = Frame::new(
        "5b0e2d36-0c4c-4a51-9a76-6a1c0d2a9f10",
        1_712_345_678.123,
        Message::FileWrite(FileWrite {
            path: "/home/alice/projects/site/src/main.rs".into(),
            content: text_of(4096),
            encoding: Encoding::Utf8,
            create_parents: true,
        }),
    );
    bench_frame("FILE_WRITE 4 KiB", &write, budget);

    let contents = Frame::new(
        "5b0e2d36-0c4c-4a51-9a76-6a1c0d2a9f11",
        1_712_345_678.456,
        Message::FileContents(FileContents {
            content: text_of(1 << 20),
            encoding: Encoding::Utf8,
            size_bytes: 1 << 20,
            truncated: false,
        }),
    )
    .with_capacity(4);
    bench_frame("FILE_CONTENTS 1 MiB", &contents, budget);
}
