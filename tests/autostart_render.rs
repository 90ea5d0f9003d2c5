//! The autostart files as rendered from explicit paths (CLI.md §9.2–§9.4):
//! the acceptance vectors, systemd quoting of hostile paths, XML escaping in
//! the launchd property list and the Task Scheduler document (read back by
//! Python's own parsers), and the paths each format refuses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use autogpt_shim::config::Platform;
use autogpt_shim::config::autostart::render::{
    self, Entry, launchd_plist, systemd_unit, task_xml, windows_quoted,
};

const EXE: &str = "/opt/bin/autogpt-shim";
const CONFIG: &str = "/opt/etc/autogpt-local-executor/config.toml";
const OUT: &str = "/opt/state/shim.out.log";
const ERR: &str = "/opt/state/shim.err.log";

fn entry<'a>(exe: &'a str, config: &'a str) -> Entry<'a> {
    Entry {
        exe: Path::new(exe),
        config: Path::new(config),
        stdout_log: Path::new(OUT),
        stderr_log: Path::new(ERR),
        passphrase_file: None,
    }
}

/// Paths that every format must carry unchanged: spaces, quotes, a
/// backslash, `%`, `$`, `&`, `<`, `>`, `;`, a `#`, non-ASCII letters, and
/// text that would be a directive or another argument if it escaped its
/// quoting.
const HOSTILE: &[&str] = &[
    "/tmp/a b/config.toml",
    "/tmp/100%/%h/%%n.toml",
    "/tmp/$HOME/${USER}/$$/c.toml",
    "/tmp/say \"hi\"/it's/c.toml",
    "/tmp/back\\slash\\/c.toml",
    "/tmp/x\" start --enable-shell \"/c.toml",
    "/tmp/; /bin/sh -c id ;/c.toml",
    "/tmp/a&b<c>d/é ü 日本/#c.toml",
];

// --- systemd ---------------------------------------------------------------------

#[test]
fn systemd_unit_matches_the_acceptance_vector() {
    let unit = systemd_unit(&entry(EXE, CONFIG)).unwrap();
    let lines: Vec<&str> = unit.lines().collect();
    for expected in [
        "[Unit]",
        "Description=AutoGPT Local PC Executor shim",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        "Type=simple",
        "ExecStart=/opt/bin/autogpt-shim --config /opt/etc/autogpt-local-executor/config.toml start",
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=77 78",
        "StandardOutput=append:/opt/state/shim.out.log",
        "StandardError=append:/opt/state/shim.err.log",
        "[Install]",
        "WantedBy=default.target",
    ] {
        assert!(lines.contains(&expected), "missing {expected:?} in\n{unit}");
    }
    assert!(!unit.contains("Environment"), "{unit}");
}

#[test]
fn rendered_files_do_not_leak_the_home_directory() {
    let home = std::env::var("HOME").unwrap_or_default();
    let e = entry(EXE, CONFIG);
    for text in [
        systemd_unit(&e).unwrap(),
        launchd_plist(&e).unwrap(),
        task_xml(&e).unwrap(),
    ] {
        if home.len() > 1 {
            assert!(!text.contains(&home), "{text}");
        }
        assert!(
            !text.contains("/home/") && !text.contains("/root"),
            "{text}"
        );
        assert!(text.contains(EXE) && text.contains(CONFIG), "{text}");
    }
}

#[test]
fn plain_paths_are_written_without_quotes() {
    let unit = systemd_unit(&entry("/usr/local/bin/autogpt-shim", "/etc/x/config.toml")).unwrap();
    assert!(
        unit.contains(
            "\nExecStart=/usr/local/bin/autogpt-shim --config /etc/x/config.toml start\n"
        )
    );
}

#[test]
fn systemd_arguments_are_quoted_and_escaped_per_systemd_syntax() {
    let cases = [
        ("/tmp/a b/c.toml", "\"/tmp/a b/c.toml\""),
        ("/tmp/100%/c.toml", "\"/tmp/100%%/c.toml\""),
        ("/tmp/$HOME/c.toml", "/tmp/$$HOME/c.toml"),
        ("/tmp/${USER}/c.toml", "/tmp/$${USER}/c.toml"),
        ("/tmp/say \"hi\"/c.toml", "\"/tmp/say \\\"hi\\\"/c.toml\""),
        ("/tmp/it's/c.toml", "\"/tmp/it's/c.toml\""),
        ("/tmp/back\\slash/c.toml", "\"/tmp/back\\\\slash/c.toml\""),
        (
            "/tmp/x\" start --enable-shell \"/c.toml",
            "\"/tmp/x\\\" start --enable-shell \\\"/c.toml\"",
        ),
        ("/tmp/a;b/c.toml", "/tmp/a;b/c.toml"),
        ("/tmp/é ü/c.toml", "\"/tmp/é ü/c.toml\""),
    ];
    for (path, word) in cases {
        let unit = systemd_unit(&entry(EXE, path)).unwrap();
        let expected = format!("\nExecStart={EXE} --config {word} start\n");
        assert!(unit.contains(&expected), "{path}: {unit}");
    }
}

#[test]
fn a_program_path_with_spaces_is_quoted_and_percent_escaped() {
    let unit = systemd_unit(&entry("/opt/my apps/100%/autogpt-shim", CONFIG)).unwrap();
    assert!(
        unit.contains(&format!(
            "\nExecStart=\"/opt/my apps/100%%/autogpt-shim\" --config {CONFIG} start\n"
        )),
        "{unit}"
    );
}

#[test]
fn hostile_paths_never_add_a_line_or_a_directive() {
    let keys = |unit: &str| -> Vec<String> {
        unit.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split('=').next().unwrap().to_owned())
            .collect()
    };
    let plain = keys(&systemd_unit(&entry(EXE, CONFIG)).unwrap());
    for path in HOSTILE {
        let e = Entry {
            exe: Path::new(EXE),
            config: Path::new(path),
            stdout_log: Path::new(path),
            stderr_log: Path::new(path),
            passphrase_file: None,
        };
        let unit = systemd_unit(&e).unwrap();
        assert_eq!(keys(&unit), plain, "{path}:\n{unit}");
        // The ExecStart line splits into exactly five words the way systemd
        // splits it.
        let exec = unit
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap();
        assert_eq!(
            systemd_words(exec),
            vec![
                EXE.to_owned(),
                "--config".into(),
                path.to_string(),
                "start".into()
            ],
            "{exec}"
        );
    }
}

/// systemd's splitting of a command line, for the subset the renderer
/// emits: words separated by spaces, a word wrapped whole in double
/// quotes with `\\` and `\"` escapes inside, `%%` and `$$` undone (the
/// specifier and variable passes). Anything else fails the test.
fn systemd_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return words;
        };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            loop {
                match chars.next().expect("unterminated quote") {
                    '"' => break,
                    '\\' => match chars.next().expect("dangling backslash") {
                        c @ ('\\' | '"') => word.push(c),
                        c => panic!("unknown escape \\{c}"),
                    },
                    c => word.push(c),
                }
            }
            let next = chars.peek();
            assert!(next.is_none() || next == Some(&' '), "text after a quote");
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                assert!(!matches!(c, '"' | '\\' | '\''), "unquoted {c} in {line}");
                word.push(c);
                chars.next();
            }
        }
        let undone = word.replace("%%", "\u{0}").replace("$$", "\u{1}");
        assert!(!undone.contains(['%', '$']), "unescaped % or $ in {line}");
        words.push(undone.replace('\u{0}', "%").replace('\u{1}', "$"));
    }
}

#[test]
fn a_line_break_in_any_path_is_refused() {
    let injected = "/tmp/x\n[Service]\nExecStartPre=/bin/touch /tmp/pwned";
    let in_exe = entry(injected, CONFIG);
    let in_config = entry(EXE, injected);
    let in_log = Entry {
        stdout_log: Path::new(injected),
        ..entry(EXE, CONFIG)
    };
    let in_passphrase = Entry {
        passphrase_file: Some(Path::new(injected)),
        ..entry(EXE, CONFIG)
    };
    for e in [&in_exe, &in_config, &in_log, &in_passphrase] {
        let error = systemd_unit(e).unwrap_err();
        assert_eq!(error.path, Path::new(injected));
        assert!(error.to_string().contains("control character"), "{error}");
        assert!(!error.to_string().contains('\n'), "{error}");
    }
    for e in [&in_exe, &in_config, &in_log] {
        assert!(launchd_plist(e).is_err());
    }
    for e in [&in_exe, &in_config] {
        assert!(task_xml(e).is_err());
    }
}

#[test]
fn program_paths_systemd_cannot_run_are_refused() {
    for exe in [
        "/opt/it's/autogpt-shim",
        "/opt/say\"hi\"/autogpt-shim",
        "/opt/back\\slash/autogpt-shim",
        "/opt/$HOME/autogpt-shim",
        "relative/autogpt-shim",
    ] {
        let error = systemd_unit(&entry(exe, CONFIG)).unwrap_err();
        assert_eq!(error.what, "the executable path", "{exe}");
        assert_eq!(error.format, "a systemd unit");
    }
}

#[test]
fn log_paths_systemd_would_alter_are_refused() {
    for log in ["/tmp/log ", "/tmp/log\\", "log", ""] {
        let e = Entry {
            stderr_log: Path::new(log),
            ..entry(EXE, CONFIG)
        };
        let error = systemd_unit(&e).unwrap_err();
        assert_eq!(error.what, "the stderr log path", "{log:?}");
    }
    let unit = systemd_unit(&Entry {
        stdout_log: Path::new("/tmp/a b/100%/\"x\"\\y$z.log"),
        ..entry(EXE, CONFIG)
    })
    .unwrap();
    assert!(
        unit.contains("\nStandardOutput=append:/tmp/a b/100%%/\"x\"\\y$z.log\n"),
        "{unit}"
    );
}

#[cfg(unix)]
#[test]
fn a_path_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let path = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff/c.toml"));
    let e = Entry {
        config: path,
        ..entry(EXE, CONFIG)
    };
    for error in [
        systemd_unit(&e).unwrap_err(),
        launchd_plist(&e).unwrap_err(),
        task_xml(&e).unwrap_err(),
    ] {
        assert!(error.to_string().contains("not valid UTF-8"), "{error}");
    }
}

#[test]
fn the_passphrase_file_is_named_by_path_in_a_quoted_assignment() {
    let e = Entry {
        passphrase_file: Some(Path::new("/home/u/my secrets/100%/\"p\"\\$x")),
        ..entry(EXE, CONFIG)
    };
    let unit = systemd_unit(&e).unwrap();
    let line = "Environment=\"AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE=/home/u/my secrets/100%%/\\\"p\\\"\\\\$x\"";
    assert!(unit.lines().any(|l| l == line), "{unit}");
    assert_eq!(unit.matches("Environment").count(), 1, "{unit}");
    assert!(
        !unit.contains("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE="),
        "{unit}"
    );
}

// --- launchd ---------------------------------------------------------------------

#[test]
fn launchd_plist_has_the_required_keys() {
    let plist = launchd_plist(&entry(EXE, CONFIG)).unwrap();
    for expected in [
        "<key>RunAtLoad</key>",
        "<key>KeepAlive</key>",
        "<key>SuccessfulExit</key>",
        "<string>net.autogpt.shim</string>",
        "<string>/opt/bin/autogpt-shim</string>",
        "<string>/opt/etc/autogpt-local-executor/config.toml</string>",
        "<string>Background</string>",
        "<key>StandardOutPath</key>",
        "<key>StandardErrorPath</key>",
    ] {
        assert!(plist.contains(expected), "missing {expected} in\n{plist}");
    }
    let parsed = python_plist(plist.as_bytes());
    assert_eq!(parsed["Label"], "net.autogpt.shim");
    assert_eq!(parsed["RunAtLoad"], true);
    assert_eq!(
        parsed["KeepAlive"],
        serde_json::json!({"SuccessfulExit": false})
    );
    assert_eq!(parsed["ProcessType"], "Background");
    assert_eq!(parsed["StandardOutPath"], OUT);
    assert_eq!(parsed["StandardErrorPath"], ERR);
}

#[test]
fn launchd_plist_carries_hostile_paths_unchanged() {
    for path in HOSTILE {
        let e = Entry {
            exe: Path::new(path),
            config: Path::new(path),
            stdout_log: Path::new(path),
            stderr_log: Path::new(path),
            passphrase_file: None,
        };
        let plist = launchd_plist(&e).unwrap();
        let parsed = python_plist(plist.as_bytes());
        assert_eq!(
            parsed["ProgramArguments"],
            serde_json::json!([path, "--config", path, "start"]),
            "{plist}"
        );
        assert_eq!(parsed["StandardOutPath"], *path);
        assert_eq!(parsed.as_object().unwrap().len(), 7, "{plist}");
    }
}

/// The property list as Python's `plistlib` reads it, as JSON.
fn python_plist(bytes: &[u8]) -> serde_json::Value {
    let script = "import json, plistlib, sys\n\
                  print(json.dumps(plistlib.loads(sys.stdin.buffer.read())))";
    serde_json::from_str(&python(script, bytes)).unwrap()
}

// --- Task Scheduler --------------------------------------------------------------

#[test]
fn task_xml_matches_the_acceptance_vector() {
    let xml = task_xml(&entry(EXE, CONFIG)).unwrap();
    for expected in [
        "<?xml version=\"1.0\" encoding=\"UTF-16\"?>",
        "xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\"",
        "<LogonTrigger>",
        "<URI>\\AutoGPT\\Shim</URI>",
        "<Description>AutoGPT Local PC Executor shim</Description>",
        "<LogonType>InteractiveToken</LogonType>",
        "<RunLevel>LeastPrivilege</RunLevel>",
        "<ExecutionTimeLimit>PT0S</ExecutionTimeLimit>",
        "<Interval>PT1M</Interval>",
        "<Count>3</Count>",
        "<Command>/opt/bin/autogpt-shim</Command>",
        "<Arguments>--config \"/opt/etc/autogpt-local-executor/config.toml\" start</Arguments>",
    ] {
        assert!(xml.contains(expected), "missing {expected} in\n{xml}");
    }
}

#[test]
fn task_xml_is_written_as_utf16le_with_a_byte_order_mark() {
    let bytes = render::render(Platform::Windows, &entry(EXE, CONFIG)).unwrap();
    assert_eq!(&bytes[..2], &[0xFF, 0xFE]);
    let units: Vec<u16> = bytes[2..]
        .chunks(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let text = String::from_utf16(&units).unwrap();
    assert_eq!(text, task_xml(&entry(EXE, CONFIG)).unwrap());
    // Python's XML parser honours the declaration and the mark.
    let (command, arguments) = python_task(&bytes);
    assert_eq!(command, EXE);
    assert_eq!(
        arguments,
        "--config \"/opt/etc/autogpt-local-executor/config.toml\" start"
    );
}

#[test]
fn task_xml_escapes_markup_in_paths() {
    let exe = "C:\\Program Files\\A&B <shim>\\autogpt-shim.exe";
    let config = "C:\\Users\\O'Brien & Co\\<x>\\config.toml";
    let bytes = render::render(Platform::Windows, &entry(exe, config)).unwrap();
    let (command, arguments) = python_task(&bytes);
    assert_eq!(command, exe);
    assert_eq!(arguments, format!("--config \"{config}\" start"));
    let text = task_xml(&entry(exe, config)).unwrap();
    assert!(text.contains("A&amp;B &lt;shim&gt;"), "{text}");
}

#[test]
fn windows_arguments_are_quoted_as_windows_programs_split_them() {
    assert_eq!(windows_quoted("C:\\a b\\c.toml"), "\"C:\\a b\\c.toml\"");
    // Backslashes before the closing quote are doubled, so the quote stays
    // a closing quote.
    assert_eq!(windows_quoted("C:\\dir\\"), "\"C:\\dir\\\\\"");
    // A quote in the text is escaped, with the backslashes before it doubled.
    assert_eq!(windows_quoted("a\\\"b"), "\"a\\\\\\\"b\"");
    assert_eq!(windows_quoted("a\"b"), "\"a\\\"b\"");
}

#[test]
fn task_paths_with_percent_signs_are_refused() {
    let error = task_xml(&entry(EXE, "C:\\Users\\%USERNAME%\\config.toml")).unwrap_err();
    assert!(error.to_string().contains("%NAME%"), "{error}");
    let error = task_xml(&entry("C:\\a\"b\\shim.exe", CONFIG)).unwrap_err();
    assert_eq!(error.what, "the executable path");
}

/// The task's `Command` and `Arguments` as Python's XML parser reads them.
fn python_task(bytes: &[u8]) -> (String, String) {
    let script = "import json, sys, xml.etree.ElementTree as ET\n\
                  ns = {'t': 'http://schemas.microsoft.com/windows/2004/02/mit/task'}\n\
                  root = ET.fromstring(sys.stdin.buffer.read())\n\
                  print(json.dumps([root.find('t:Actions/t:Exec/t:Command', ns).text,\n\
                                    root.find('t:Actions/t:Exec/t:Arguments', ns).text]))";
    let pair: (String, String) = serde_json::from_str(&python(script, bytes)).unwrap();
    pair
}

/// Runs `script` under python3 with `input` on stdin; its stdout.
fn python(script: &str, input: &[u8]) -> String {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required for this test (an independent XML parser)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
