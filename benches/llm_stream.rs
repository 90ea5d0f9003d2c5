//! The local LLM's streaming path end to end: this build's release binary
//! with `enable_local_llm` on, its `ollama_url` pointed at the emulator's
//! Ollama (no real Ollama can run here), driven through the platform
//! emulator over TLS on loopback:
//!
//! 1. throughput: one `LOCAL_LLM_COMPLETION` of many small pieces
//!    (`BENCH_PIECES`, default 20,000, of 4 bytes each) streamed as chunks to
//!    a platform that reads normally: chunks per second and the latency
//!    the shim adds per chunk, beside a bare `ureq` read of the same NDJSON
//!    stream from the same Ollama emulator in the same run (each line
//!    parsed as JSON and its piece taken out, as the shim does), runs of
//!    the two alternating;
//! 2. bounded memory: a 100 MB stream (`StreamStep::Flood`, 1 KiB pieces)
//!    to a platform that reads 64 KiB every 50 ms, with the shim's resident
//!    set sampled every 20 ms and its peak (`VmHWM`) beside its idle
//!    baseline. The platform's slowness must hold the upstream stream back
//!    (the chunk backlog bound) rather than fill the shim's memory; the
//!    completion ends with `LOCAL_LLM_FAILED` once the assembled content
//!    passes `MAX_CONTENT_BYTES` (8 MiB), which is expected and printed.
//!
//! The platform side is the emulator's connection, which records every
//! frame with its arrival time and checks it against the platform's rules:
//! that work is part of the shim's figures and not of the baseline's.
//!
//! Run with `cargo bench --bench llm_stream` (`BENCH_RUNS` sets the runs
//! of section 1, default 3).

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/start_support/mod.rs"]
mod start_support;

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use autogpt_shim::llm::MAX_CONTENT_BYTES;
use autogpt_shim_emulator::ollama::DEFAULT_MODEL;
use autogpt_shim_emulator::{
    ChatBehaviour, Conn, DoneLine, Emulator, HelloAck, OllamaEmulator, OllamaOptions, RawKind,
    StreamStep,
};
use serde_json::{Value, json};
use start_support::*;

const MIB: f64 = 1024.0 * 1024.0;
/// Section 1's piece size.
const PIECE_BYTES: usize = 4;
/// Section 2's stream.
const FLOOD_BYTES: u64 = 100_000_000;
const FLOOD_PIECE_BYTES: usize = 1024;
/// Section 2's slow platform.
const SLOW_BYTES: usize = 64 << 10;
const SLOW_EVERY: Duration = Duration::from_millis(50);
/// How often section 2 samples the resident set.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// Long enough for any answer here: the platform must not give up.
const PLATFORM_WAIT_SECONDS: i64 = 600;
const LONG: Duration = Duration::from_secs(600);

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// A stream of `pieces` pieces of [`PIECE_BYTES`] and a done line.
fn many_pieces(pieces: usize) -> ChatBehaviour {
    ChatBehaviour::Stream(vec![
        StreamStep::Flood {
            content_bytes: (pieces * PIECE_BYTES) as u64,
            piece_bytes: PIECE_BYTES,
        },
        StreamStep::Done(DoneLine::stop(12, pieces as u64)),
    ])
}

fn completion_request() -> Value {
    json!({
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Count."}],
        "max_tokens": 100_000,
        "stream": true,
    })
}

/// One timed completion: when the first piece arrived, when the last one
/// did, how many pieces, and how many content bytes.
struct Timed {
    first: Duration,
    last: Duration,
    pieces: usize,
    bytes: usize,
}

/// The baseline: `POST /api/chat` with `ureq`, the body read line by line,
/// each line parsed and its piece taken out.
fn bare_read(ollama: &OllamaEmulator) -> Timed {
    let body = json!({
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Count."}],
        "stream": true,
        "options": {"temperature": 0.0, "top_p": 1.0, "num_predict": 100_000},
    })
    .to_string();
    let started = Instant::now();
    let mut response = ureq::post(format!("{}/api/chat", ollama.url()))
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = BufReader::new(response.body_mut().as_reader());
    let mut line = Vec::new();
    let mut timed = Timed {
        first: Duration::ZERO,
        last: Duration::ZERO,
        pieces: 0,
        bytes: 0,
    };
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        let Ok(value) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let piece = value["message"]["content"].as_str().unwrap_or_default();
        if !piece.is_empty() {
            if timed.pieces == 0 {
                timed.first = started.elapsed();
            }
            timed.pieces += 1;
            timed.bytes += piece.len();
            timed.last = started.elapsed();
        }
        if value["done"] == true {
            break;
        }
    }
    timed
}

/// The shim: one streamed completion on `conn`, timed from the request's
/// hand-over to the emulator to each chunk's arrival there.
fn through_shim(conn: &Conn) -> Timed {
    let started = Instant::now();
    let id = conn
        .request("LOCAL_LLM_COMPLETION", completion_request())
        .unwrap();
    // Frames are taken in order as they come: waiting for the response by
    // id would rescan every queued chunk at each arrival.
    let response = loop {
        let frame = conn.recv(LONG).unwrap();
        if frame["id"] == id.as_str() && frame["type"] != "LOCAL_LLM_COMPLETION_CHUNK" {
            break frame;
        }
    };
    assert_eq!(
        response["type"], "LOCAL_LLM_COMPLETION_RESPONSE",
        "{response}"
    );
    let mut timed = Timed {
        first: Duration::ZERO,
        last: Duration::ZERO,
        pieces: 0,
        bytes: 0,
    };
    for frame in conn.raw_frames() {
        if frame.kind != RawKind::Text || frame.at < started {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(&frame.data) else {
            continue;
        };
        if value["id"] != id.as_str() || value["type"] != "LOCAL_LLM_COMPLETION_CHUNK" {
            continue;
        }
        let delta = value["payload"]["delta"].as_str().unwrap();
        if delta.is_empty() {
            continue;
        }
        let at = frame.at.duration_since(started);
        if timed.pieces == 0 {
            timed.first = at;
        }
        timed.pieces += 1;
        timed.bytes += delta.len();
        timed.last = at;
    }
    timed
}

/// A shim with the local LLM on against `ollama`, connected with a
/// platform that waits long; returns it with its connection.
fn llm_shim(home: &Home, emulator: &Emulator, ollama: &OllamaEmulator) -> (Shim, Conn) {
    let url = ollama.url();
    let shim = Shim::start_with_env(
        home,
        emulator,
        &[
            ("AUTOGPT_SHIM_ENABLE_LOCAL_LLM", "true"),
            ("AUTOGPT_SHIM_OLLAMA_URL", &url),
        ],
        &[],
    );
    let (conn, hello) = connect(
        emulator,
        HelloAck::new()
            .grant(["files", "local_llm"])
            .command_timeout_seconds(PLATFORM_WAIT_SECONDS),
    );
    assert_eq!(
        hello["payload"]["local_llm_models"],
        json!([DEFAULT_MODEL]),
        "{hello}"
    );
    settle(&conn);
    (shim, conn)
}

/// CPU time (user + system) of process `pid` so far, in seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // utime and stime, fields 14 and 15 of the line, in clock ticks.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn throughput(pieces: usize, runs: usize) {
    let ollama = OllamaEmulator::start(OllamaOptions::new().chat(many_pieces(pieces))).unwrap();
    let home = Home::new();
    let emulator = emulator();
    let (shim, conn) = llm_shim(&home, &emulator, &ollama);
    let shim_pid = shim.pid().to_string();

    // One of each first, unmeasured: connections, caches, the audit file.
    bare_read(&ollama);
    through_shim(&conn);

    let mut shim_runs = Vec::new();
    let mut bare_runs = Vec::new();
    let mut shim_cpu = Vec::new();
    for _ in 0..runs {
        let bare = bare_read(&ollama);
        assert_eq!(bare.pieces, pieces);
        bare_runs.push(bare);
        let cpu_before = cpu_seconds(&shim_pid);
        let shim = through_shim(&conn);
        shim_cpu.push(cpu_seconds(&shim_pid) - cpu_before);
        assert_eq!(shim.pieces, pieces, "the shim lost pieces");
        assert_eq!(shim.bytes, pieces * PIECE_BYTES);
        shim_runs.push(shim);
    }
    let rate = |runs: &[Timed]| {
        median(
            runs.iter()
                .map(|t| pieces as f64 / t.last.as_secs_f64())
                .collect(),
        )
    };
    let last = |runs: &[Timed]| median(runs.iter().map(|t| t.last.as_secs_f64()).collect());
    let first = |runs: &[Timed]| median(runs.iter().map(|t| t.first.as_secs_f64()).collect());
    let (shim_rate, bare_rate) = (rate(&shim_runs), rate(&bare_runs));
    let (shim_last, bare_last) = (last(&shim_runs), last(&bare_runs));
    let added_us = (shim_last - bare_last) / pieces as f64 * 1e6;
    println!(
        "1. streaming {pieces} pieces of {PIECE_BYTES} bytes, median of {runs} runs each (alternating)"
    );
    println!(
        "   bare ureq read of the NDJSON:  {:>9.0} pieces/s, all in {:>7.1} ms, first after {:.2} ms",
        bare_rate,
        bare_last * 1e3,
        first(&bare_runs) * 1e3
    );
    println!(
        "   through the shim as chunks:    {:>9.0} chunks/s, all in {:>7.1} ms, first after {:.2} ms",
        shim_rate,
        shim_last * 1e3,
        first(&shim_runs) * 1e3
    );
    println!(
        "   shim/bare time {:.2}×; added latency per chunk {:.1} µs; shim CPU {:.1} µs per chunk",
        shim_last / bare_last,
        added_us,
        median(shim_cpu) / pieces as f64 * 1e6
    );
    println!(
        "   (the shim's first chunk includes the request's way through the emulator, \
         whose connection thread sends within a {} ms poll)",
        autogpt_shim_emulator::conn::POLL_INTERVAL.as_millis()
    );
}

/// Samples `VmRSS` of `pid` until `stop`; returns the largest seen.
fn sample_rss(pid: i32, stop: &AtomicBool) -> u64 {
    let mut largest = 0;
    while !stop.load(Ordering::SeqCst) {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                largest = largest.max(kib * 1024);
            }
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    largest
}

fn bounded_memory() {
    let ollama = OllamaEmulator::start(OllamaOptions::new().chat(ChatBehaviour::Stream(vec![
        StreamStep::Flood {
            content_bytes: FLOOD_BYTES,
            piece_bytes: FLOOD_PIECE_BYTES,
        },
        StreamStep::Done(DoneLine::stop(12, FLOOD_BYTES / FLOOD_PIECE_BYTES as u64)),
    ])))
    .unwrap();
    let home = Home::new();
    let emulator = emulator();
    let (shim, conn) = llm_shim(&home, &emulator, &ollama);
    conn.allow_late_answers();
    let pid = shim.pid();
    let reset = reset_peak(pid);
    let idle = peak_rss(pid);
    let idle_rss = memory_of(pid, "VmRSS");

    conn.read_slowly(SLOW_BYTES, SLOW_EVERY);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (largest_rss, response) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample_rss(pid, &stop));
        let id = conn
            .request("LOCAL_LLM_COMPLETION", completion_request())
            .unwrap();
        let response = conn.wait_response(&id, LONG).unwrap();
        stop.store(true, Ordering::SeqCst);
        (sampler.join().unwrap(), response)
    });
    let elapsed = started.elapsed();
    let peak = peak_rss(pid);
    let streamed = ollama.streamed_bytes();
    let chunks = conn
        .raw_frames()
        .iter()
        .filter(|f| {
            f.text()
                .is_some_and(|t| t.contains("LOCAL_LLM_COMPLETION_CHUNK"))
        })
        .count();
    let outcomes = ollama.wait_outcomes(1, Duration::from_secs(10));

    println!(
        "2. a {} MB stream of {FLOOD_PIECE_BYTES}-byte pieces, platform reading {} KiB every {} ms",
        FLOOD_BYTES / 1_000_000,
        SLOW_BYTES >> 10,
        SLOW_EVERY.as_millis()
    );
    println!(
        "   idle baseline: {} ({})",
        mib(idle),
        if reset {
            "resident set, peak reset there"
        } else {
            "peak so far: the system refused the peak reset"
        }
    );
    println!(
        "   peak {} (VmHWM), {} above idle; largest VmRSS sampled {} ({} above idle)",
        mib(peak),
        mib(peak.saturating_sub(idle)),
        mib(largest_rss),
        mib(largest_rss.saturating_sub(idle_rss))
    );
    println!(
        "   Ollama wrote {:.1} MB of {} MB before the completion ended ({:.1}%); {} chunks reached the platform in {:.1} s",
        streamed as f64 / 1e6,
        FLOOD_BYTES / 1_000_000,
        streamed as f64 * 100.0 / FLOOD_BYTES as f64,
        chunks,
        elapsed.as_secs_f64()
    );
    let payload = &response["payload"];
    match response["type"].as_str() {
        Some("ERROR") => println!(
            "   ended with ERROR {} (expected past MAX_CONTENT_BYTES = {} bytes): {}",
            payload["code"].as_str().unwrap_or("?"),
            MAX_CONTENT_BYTES,
            payload["message"].as_str().unwrap_or("?")
        ),
        other => println!(
            "   ended with {} ({} content bytes)",
            other.unwrap_or("?"),
            payload["content"].as_str().map_or(0, str::len)
        ),
    }
    println!("   upstream answer: {outcomes:?}");
}

fn main() {
    let pieces = env_number("BENCH_PIECES", 20_000);
    let runs = env_number("BENCH_RUNS", 3).max(1);
    println!("local LLM streaming through the release daemon: {BIN}");
    throughput(pieces, runs);
    bounded_memory();
}
