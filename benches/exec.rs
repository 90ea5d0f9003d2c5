//! Cost of starting a command through the exec module, next to a bare
//! `std::process::Command::new("true").status()` measured in the same run,
//! with the parent small and then holding 256 MiB resident (fork-based
//! spawning copies page tables, so it slows down as the parent grows; the
//! module forks in its small spawner process instead, so its cost should
//! not move with the shim's size). Then the added latency of each
//! command sandbox (Landlock, the network namespace, both) beside no
//! sandbox, in the same run.
//! Run with `cargo bench --bench exec` (`BENCH_RUNS` sets the sample count).

// A benchmark whose setup fails has nothing to measure: stopping is right.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::ffi::OsString;
use std::hint::black_box;
use std::time::Instant;

use autogpt_shim::exec::{Cancel, ExecContext, Spawner, execute};
use autogpt_shim::jail::{Jail, JailOptions};
use autogpt_shim::protocol::{ExecuteCommand, Shell};

fn percentiles(runs: usize, mut op: impl FnMut()) -> (f64, f64) {
    for _ in 0..runs / 10 {
        op();
    }
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            op();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

fn measure(label: &str, runs: usize, ctx: &ExecContext<'_>, req: &ExecuteCommand) {
    let (b50, b99) = percentiles(runs, || {
        let status = std::process::Command::new("true").status().unwrap();
        assert!(status.success());
    });
    let (m50, m99) = execute_percentiles(runs, ctx, req);
    println!(
        "{label:<22} bare Command::status p50 {b50:>7.0} µs p99 {b99:>7.0} µs | EXECUTE_COMMAND argv [\"true\"] p50 {m50:>7.0} µs p99 {m99:>7.0} µs | p50 ratio {:.2}x",
        m50 / b50
    );
}

/// p50 and p99 of `EXECUTE_COMMAND argv ["true"]` under `ctx`.
fn execute_percentiles(runs: usize, ctx: &ExecContext<'_>, req: &ExecuteCommand) -> (f64, f64) {
    percentiles(runs, || {
        let out = execute(ctx, black_box(req));
        let result = out.reply.unwrap();
        assert_eq!(result.exit_code, 0);
    })
}

/// Every sandbox this kernel offers, next to none.
fn sandbox_modes(runs: usize, ctx: &ExecContext<'_>, req: &ExecuteCommand) {
    use autogpt_shim::exec::sandbox::{probe_landlock, probe_network};
    use autogpt_shim::exec::{CommandSandbox, FsSandbox, NetSandbox};
    let fs = probe_landlock().ok().map(FsSandbox::Landlock);
    let net = probe_network(std::path::Path::new(env!("CARGO_BIN_EXE_autogpt-shim")))
        .ok()
        .map(|()| NetSandbox::Namespace);
    let mut modes = vec![("no sandbox", Some(CommandSandbox::default()))];
    modes.push((
        "workspace (Landlock)",
        fs.map(|fs| CommandSandbox {
            fs,
            net: NetSandbox::Off,
        }),
    ));
    modes.push((
        "network none",
        net.map(|net| CommandSandbox {
            fs: FsSandbox::Off,
            net,
        }),
    ));
    modes.push((
        "workspace + none",
        fs.zip(net).map(|(fs, net)| CommandSandbox { fs, net }),
    ));
    println!("sandbox modes, {runs} runs each");
    let mut baseline = None;
    for (label, sandbox) in modes {
        let Some(sandbox) = sandbox else {
            println!("{label:<22} unavailable on this kernel");
            continue;
        };
        let ctx = ExecContext { sandbox, ..*ctx };
        let (p50, p99) = execute_percentiles(runs, &ctx, req);
        let base = *baseline.get_or_insert(p50);
        println!(
            "{label:<22} EXECUTE_COMMAND argv [\"true\"] p50 {p50:>7.0} µs p99 {p99:>7.0} µs | added p50 {:>6.0} µs | ratio {:.2}x",
            p50 - base,
            p50 / base
        );
    }
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let jail = Jail::pin(&root, JailOptions::default()).unwrap();
    let host_env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k == "PATH" || k == "HOME" || k == "LANG")
        .collect();
    let spawner = Spawner::start(std::path::Path::new(env!("CARGO_BIN_EXE_autogpt-shim"))).unwrap();
    let cancel = Cancel::new().unwrap();
    let ctx = ExecContext {
        jail: &jail,
        command_timeout_seconds: 30,
        max_file_size_bytes: 10 << 20,
        host_env: &host_env,
        spawner: &spawner,
        cancel: &cancel,
        platform_deadline: None,
        sandbox: autogpt_shim::exec::CommandSandbox::default(),
        rules: autogpt_shim::exec::Rules::none(),
    };
    let req = ExecuteCommand {
        command: None,
        argv: Some(vec!["true".into()]),
        shell: Shell::Auto,
        cwd: None,
        timeout_seconds: None,
        env: Default::default(),
    };
    println!("command start-up, {runs} runs each");
    measure("small parent", runs, &ctx, &req);
    sandbox_modes(runs, &ctx, &req);
    // 256 MiB touched, so it is resident, not just reserved.
    let ballast: Vec<u8> = vec![1u8; 256 << 20];
    let resident: u64 = ballast.iter().step_by(4096).map(|&b| u64::from(b)).sum();
    black_box(resident);
    measure("256 MiB resident", runs, &ctx, &req);
    black_box(&ballast);
}
