//! Computer use end to end under a private Xvfb (1920×1080, an EWMH window
//! manager, a few test windows on a plaid root), against baselines measured
//! in the same run:
//!
//! 1. `SCREENSHOT_REQUEST` of the whole screen as JPEG at quality 75 and as
//!    PNG: from the request handed to the platform emulator to the arrival
//!    of its base64 reply (the emulator timestamps arrivals exactly), and
//!    the bytes of image and reply; the baseline is a bare capture and
//!    encode of the same screen ([`RootCapture`], no lock, mask, audit
//!    record or wire), samples alternating.
//! 2. Input latency: `INPUT_ACTION` `left_click` on a test window, from the
//!    request handed to the emulator until the window has received the
//!    button press; the baseline is the same press and release injected
//!    directly through XTEST on a connection of the benchmark's own.
//!    Both are seen by polling the window's event log every millisecond.
//!
//! Run with `cargo bench --features desktop --bench desktop` (`BENCH_RUNS`
//! sets the samples per figure, default 20). Needs Xvfb, openbox, xdotool,
//! xsetroot and python3-tk, as the tests do.

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/desktop_support/mod.rs"]
mod desktop_support;
#[path = "../tests/start_support/mod.rs"]
mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim::desktop::RootCapture;
use autogpt_shim::protocol::ImageFormat;
use autogpt_shim_emulator::HelloAck;
use desktop_support::{Event, TestWindow, XServer, XServerOptions};
use serde_json::json;
use start_support::{Home, Shim, WAIT, connect, emulator};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{BUTTON_PRESS_EVENT, BUTTON_RELEASE_EVENT, ConnectionExt as _};
use x11rb::protocol::xtest::ConnectionExt as _;

fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn p90(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[(samples.len() * 9 / 10).min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Polls `window` until a button press arrives after `mark`; when.
fn wait_press(window: &TestWindow, mark: usize) -> Instant {
    let deadline = Instant::now() + WAIT;
    loop {
        if window
            .events_since(mark)
            .iter()
            .any(|e| matches!(e, Event::Press { button: 1, .. }))
        {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "the window saw no press");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    let runs = runs();
    let x = XServer::start(XServerOptions::new().window_manager());
    // A plaid root and some windows, so the images are not one flat colour.
    x.run_ok(
        "xsetroot",
        &["-mod", "7", "5", "-fg", "#203040", "-bg", "#c0b0a0"],
    );
    let colours = [[200, 40, 40], [40, 160, 60], [50, 70, 210], [230, 200, 30]];
    let windows: Vec<TestWindow> = colours
        .iter()
        .enumerate()
        .map(|(i, colour)| {
            let i = i as i32;
            TestWindow::open(
                &x,
                &format!("bench window {i}"),
                ("bench", "Bench"),
                *colour,
                [100 + 380 * i, 120 + 140 * i, 520, 360],
            )
        })
        .collect();

    let home = Home::new();
    let platform = emulator();
    let display = x.display();
    let env = [
        ("DISPLAY", display.as_str()),
        ("AUTOGPT_SHIM_MAX_SCREENSHOTS_PER_MINUTE", "1000000"),
    ];
    let mut shim = Shim::start_with_env(&home, &platform, &env, &["--enable-computer-use"]);
    let ack = HelloAck::new()
        .grant(["files", "computer_use"])
        .max_file_size_bytes(16 * 1024 * 1024);
    let (conn, hello) = connect(&platform, ack);
    assert!(
        hello["payload"]["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("computer_use")),
        "computer use was not advertised: {hello}"
    );
    let baseline = RootCapture::open(&display).unwrap();

    println!("desktop benchmark: {runs} samples per figure, 1920x1080 screen");
    for (format, name) in [(ImageFormat::Jpeg, "jpeg"), (ImageFormat::Png, "png")] {
        let mut shim_ms = Vec::new();
        let mut bare_ms = Vec::new();
        let mut reply_bytes = 0;
        let mut image_bytes = 0;
        let mut bare_bytes = 0;
        // One warm-up of each.
        conn.call(
            "SCREENSHOT_REQUEST",
            json!({"format": name, "quality": 75}),
            WAIT,
        )
        .unwrap();
        baseline.capture(format, 75).unwrap();
        for _ in 0..runs {
            let id = conn
                .request("SCREENSHOT_REQUEST", json!({"format": name, "quality": 75}))
                .unwrap();
            let sent = Instant::now();
            let response = conn.wait_response(&id, WAIT).unwrap();
            let arrived = conn.arrival_of(&id).unwrap();
            assert_eq!(response["type"], "SCREENSHOT_RESPONSE", "{response}");
            let encoded = response["payload"]["image_base64"].as_str().unwrap();
            reply_bytes = encoded.len();
            image_bytes = encoded.len() / 4 * 3;
            shim_ms.push(ms(arrived.saturating_duration_since(sent)));

            let started = Instant::now();
            let bytes = baseline.capture(format, 75).unwrap();
            bare_ms.push(ms(started.elapsed()));
            bare_bytes = bytes.len();
        }
        let (shim_median, bare_median) = (median(shim_ms.clone()), median(bare_ms.clone()));
        println!(
            "screenshot {name:<4}  request→reply median {shim_median:7.1} ms  p90 {:7.1} ms  \
             image ≈{image_bytes} B, reply {reply_bytes} B base64",
            p90(shim_ms)
        );
        println!(
            "           {name:<4}  bare capture+encode median {bare_median:7.1} ms  p90 {:7.1} ms  \
             {bare_bytes} B   ratio {:.2}×",
            p90(bare_ms),
            shim_median / bare_median
        );
    }

    let target = &windows[3];
    let (cx, cy) = target.centre(&x);
    let xconn = x.connect();
    let root = xconn.setup().roots[0].root;
    let mut shim_ms = Vec::new();
    let mut bare_ms = Vec::new();
    for _ in 0..runs {
        let mark = target.mark();
        let id = conn
            .request(
                "INPUT_ACTION",
                json!({"action": "left_click", "coordinate": [cx, cy]}),
            )
            .unwrap();
        let sent = Instant::now();
        let seen = wait_press(target, mark);
        conn.wait_response(&id, WAIT).unwrap();
        shim_ms.push(ms(seen.saturating_duration_since(sent)));

        let mark = target.mark();
        let started = Instant::now();
        xconn
            .xtest_fake_input(BUTTON_PRESS_EVENT, 1, 0, root, 0, 0, 0)
            .unwrap();
        xconn
            .xtest_fake_input(BUTTON_RELEASE_EVENT, 1, 0, root, 0, 0, 0)
            .unwrap();
        xconn.flush().unwrap();
        let seen = wait_press(target, mark);
        bare_ms.push(ms(seen.saturating_duration_since(started)));
        xconn.get_input_focus().unwrap().reply().unwrap();
    }
    let (shim_median, bare_median) = (median(shim_ms.clone()), median(bare_ms.clone()));
    println!(
        "input left_click  request→press seen median {shim_median:6.1} ms  p90 {:6.1} ms",
        p90(shim_ms)
    );
    println!(
        "                  bare XTEST→press seen median {bare_median:6.1} ms  p90 {:6.1} ms   \
         difference {:.1} ms",
        p90(bare_ms),
        shim_median - bare_median
    );
    drop(conn);
    shim.signal(rustix::process::Signal::TERM);
    shim.wait(WAIT);
}
