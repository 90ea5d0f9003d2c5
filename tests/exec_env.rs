//! EXEC.md §5 and §3 step 8: the child environment is the safe baseline,
//! the request's variables on top and `PYTHONIOENCODING=utf-8`, nothing
//! else; invalid entries are refused before anything runs; the audit
//! record names keys only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use std::collections::BTreeMap;

use autogpt_shim::daemon::OperationError;
use autogpt_shim::protocol::ErrorCode;
use exec_support::*;

/// `env -0` output as a map.
fn child_env(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .split('\0')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn fx_with_host_env() -> Fx {
    let mut fx = Fx::new();
    for (k, v) in [
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("LC_TIME", "C"),
        ("TZ", "UTC"),
        ("USER", "alice"),
        ("SHELL", "/bin/sh"),
        ("TMPDIR", "/tmp"),
        ("AUTOGPT_SHIM_TOKEN", "secret-token"),
        ("AUTOGPT_SHIM_AUDIT_KEY", "secret-key"),
        ("DISPLAY", ":0"),
        ("SSH_AUTH_SOCK", "/run/agent"),
        ("LOGNAME", "alice"),
        ("TERM", "xterm"),
        ("http_proxy", "http://proxy"),
        ("XLC_FOO", "not-a-locale"),
    ] {
        fx.host_env.push((k.into(), v.into()));
    }
    fx
}

#[test]
fn only_the_safe_baseline_is_inherited() {
    let fx = fx_with_host_env();
    let out = fx.run(&argv(&["env", "-0"]));
    let env = child_env(&result(&out).stdout);
    let keys: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "HOME",
            "LANG",
            "LC_ALL",
            "LC_TIME",
            "PATH",
            "PYTHONIOENCODING",
            "SHELL",
            "TMPDIR",
            "TZ",
            "USER"
        ]
    );
    assert_eq!(env["PYTHONIOENCODING"], "utf-8");
    assert!(!result(&out).stdout.contains("secret"));
}

#[test]
fn missing_baseline_variables_stay_absent() {
    let mut fx = Fx::new();
    fx.host_env.clear();
    let out = fx.run(&argv(&["/usr/bin/env", "-0"]));
    let env = child_env(&result(&out).stdout);
    assert_eq!(env.keys().collect::<Vec<_>>(), ["PYTHONIOENCODING"]);
}

#[test]
fn wire_variables_override_the_baseline_and_encoding_is_forced() {
    let fx = fx_with_host_env();
    let mut req = argv(&["env", "-0"]);
    req.env.insert("LANG".into(), "de_DE.UTF-8".into());
    req.env
        .insert("MY_VAR".into(), "value with spaces=and equals".into());
    req.env.insert("PYTHONIOENCODING".into(), "latin-1".into());
    req.env.insert("DISPLAY".into(), ":9".into());
    let out = fx.run(&req);
    let env = child_env(&result(&out).stdout);
    assert_eq!(env["LANG"], "de_DE.UTF-8");
    assert_eq!(env["MY_VAR"], "value with spaces=and equals");
    assert_eq!(env["PYTHONIOENCODING"], "utf-8");
    // Named by the request, so passed even though not in the baseline.
    assert_eq!(env["DISPLAY"], ":9");
    assert!(!env.contains_key("AUTOGPT_SHIM_TOKEN"));
}

#[test]
fn audit_names_the_final_keys_sorted_never_values() {
    let fx = fx_with_host_env();
    let mut req = command("true");
    req.env.insert("ZED".into(), "zvalue-secret".into());
    req.env.insert("ALPHA".into(), "avalue-secret".into());
    let out = fx.run(&req);
    assert_eq!(
        env_keys(&out),
        [
            "ALPHA",
            "HOME",
            "LANG",
            "LC_ALL",
            "LC_TIME",
            "PATH",
            "PYTHONIOENCODING",
            "SHELL",
            "TMPDIR",
            "TZ",
            "USER",
            "ZED"
        ]
    );
    let (details, result) = record(&out);
    assert!(result.ok);
    let text = serde_json::to_string(&details).unwrap();
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn invalid_entries_are_refused_before_spawning() {
    let fx = Fx::new();
    let marker = fx.root.join("ran");
    let cases: [(&str, &str); 4] = [
        ("", "v"),
        ("A=B", "v"),
        ("A\0B", "v"),
        ("GOOD", "secret\0value"),
    ];
    for (name, value) in cases {
        let mut req = command(&format!("touch {}", marker.display()));
        req.env.insert(name.into(), value.into());
        req.env.insert("OTHER".into(), "x".into());
        let out = fx.run(&req);
        let e = error(&out);
        assert_eq!(e.code(), ErrorCode::InternalError, "{name:?}");
        assert!(!e.message().contains("secret"), "{}", e.message());
        // Not built yet: the audit names the wire keys only.
        let mut wire: Vec<String> = vec![name.into(), "OTHER".into()];
        wire.sort();
        assert_eq!(env_keys(&out), wire);
        let (details, result) = record(&out);
        assert_eq!(result.error_code.as_deref(), Some("INTERNAL_ERROR"));
        assert_eq!(details["cwd"], fx.root_str());
        assert!(!marker.exists());
    }
}

#[test]
fn effective_timeout_is_logged_and_capped_by_t() {
    let mut fx = Fx::new();
    fx.command_timeout_seconds = 7;
    let out = fx.run(&with_timeout(command("true"), 100));
    assert_eq!(record(&out).0["timeout_seconds"], 7);
    let out = fx.run(&with_timeout(command("true"), 3));
    assert_eq!(record(&out).0["timeout_seconds"], 3);
    let out = fx.run(&command("true"));
    assert_eq!(record(&out).0["timeout_seconds"], 7);
}
