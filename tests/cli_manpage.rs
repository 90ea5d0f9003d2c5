//! The manual page of the real binary (`autogpt-shim manpage`): its option
//! lists agree with the command table and the parser in both directions,
//! and it names every exit code of src/exit.rs and every configuration
//! variable of the key table in src/config/layers.rs, both read from the
//! source files themselves. `man --warnings` (man-db with groff) must find
//! nothing to complain about; the test fails, never skips, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use autogpt_shim::cli::{COMMAND_TABLE, CommandSpec, Parsed, parse};

const BIN: &str = env!("CARGO_BIN_EXE_autogpt-shim");

fn manpage(epoch: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command.arg("manpage").env_clear();
    if let Some(epoch) = epoch {
        command.env("SOURCE_DATE_EPOCH", epoch);
    }
    command.output().expect("the binary runs")
}

fn page() -> String {
    let out = manpage(None);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Roff text back to plain text: the font changes and `\&` dropped, `\-`
/// and `\e` turned back.
fn plain(roff: &str) -> String {
    roff.replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\&", "")
        .replace("\\-", "-")
        .replace("\\e", "\\")
}

/// The lines of section `name` (`.SH name` up to the next `.SH`).
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    let heading = format!(".SH {name}");
    page.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect()
}

/// The tag lines of a section's `.TP` entries, as plain text.
fn tags(lines: &[&str]) -> Vec<String> {
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| plain(w[1]))
        .collect()
}

/// The long options of an option tag such as `-V, --version` or
/// `--config PATH`.
fn long_options(tag: &str) -> Vec<String> {
    tag.split([' ', ','])
        .filter(|w| w.starts_with("--"))
        .map(str::to_owned)
        .collect()
}

/// The options the page lists per command: the global ones under `""`,
/// those of each `.SS` command under its name.
fn listed_options(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let global = section(page, "OPTIONS");
    let entry = out.entry(String::new()).or_default();
    for tag in tags(&global) {
        entry.extend(long_options(&tag));
    }
    let commands = section(page, "COMMANDS");
    let mut current = String::new();
    let mut block: Vec<&str> = Vec::new();
    let flush = |name: &str, block: &[&str], out: &mut BTreeMap<_, BTreeSet<String>>| {
        if name.is_empty() {
            return;
        }
        let entry = out.entry(name.to_owned()).or_default();
        for tag in tags(block).iter().filter(|t| t.starts_with('-')) {
            entry.extend(long_options(tag));
        }
    };
    for line in commands {
        if let Some(name) = line.strip_prefix(".SS ") {
            flush(&current, &block, &mut out);
            block.clear();
            current = plain(name).trim_matches('"').to_owned();
        } else {
            block.push(line);
        }
    }
    flush(&current, &block, &mut out);
    out
}

/// Every command of the table, by name, the program as `""`.
fn table() -> Vec<&'static CommandSpec> {
    COMMAND_TABLE.walk()
}

/// A value the parser takes for a placeholder.
fn sample(placeholder: &str) -> &'static str {
    match placeholder {
        "LEVEL" => "info",
        "OP" => "FILE_READ",
        "DUR" => "30d",
        "MODE" => "workspace",
        "NETWORK" => "none",
        _ => "x",
    }
}

/// The command line that runs `spec` with `option` (and a value for it).
fn line_with(spec: &CommandSpec, option: &str) -> Vec<String> {
    let found = spec
        .options
        .iter()
        .find(|o| o.long == option)
        .unwrap_or_else(|| panic!("{option} is not an option of {:?}", spec.name));
    let mut words: Vec<String> = Vec::new();
    let with_value = |words: &mut Vec<String>| {
        words.push(option.to_owned());
        if let Some(value) = found.value {
            words.push(sample(value).to_owned());
        }
    };
    if spec.name.is_empty() {
        with_value(&mut words);
        words.push("status".into());
        return words;
    }
    words.extend(spec.name.split(' ').map(str::to_owned));
    with_value(&mut words);
    for arg in spec.args {
        match arg.name {
            "<seq>" => words.push("1".into()),
            "<SHELL>" => words.push("bash".into()),
            "<ARGV>..." => words.push("true".into()),
            _ => {}
        }
    }
    words
}

#[test]
fn man_page_lists_exactly_the_options_of_every_command() {
    let listed = listed_options(&page());
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for spec in table() {
        let entry = expected.entry(spec.name.to_owned()).or_default();
        entry.extend(spec.options.iter().map(|o| o.long.to_owned()));
    }
    // -h/--help is accepted everywhere and listed once, with the globals.
    expected.get_mut("").unwrap().insert("--help".into());
    assert_eq!(listed, expected);
    assert!(listed.len() > 10, "{listed:?}");
}

#[test]
fn every_option_the_man_page_lists_is_accepted_by_the_parser() {
    let listed = listed_options(&page());
    let specs = table();
    let mut checked = 0;
    for (command, options) in &listed {
        let spec = specs
            .iter()
            .find(|s| s.name == command)
            .unwrap_or_else(|| panic!("the page has a command {command:?} the table lacks"));
        for option in options {
            if option == "--help" {
                assert!(matches!(parse(["--help"]), Ok(Parsed::Help)));
                continue;
            }
            let words = line_with(spec, option);
            let parsed = parse(words.clone());
            let accepted = match option.as_str() {
                "--version" => matches!(parsed, Ok(Parsed::Version)),
                _ => matches!(parsed, Ok(Parsed::Run(_))),
            };
            assert!(accepted, "{words:?}: {parsed:?}");
            checked += 1;
        }
    }
    assert!(checked > 15, "{checked}");
}

#[test]
fn man_page_names_every_exit_code_of_the_exit_module() {
    let source =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/exit.rs"))
            .unwrap();
    let codes: Vec<String> = source
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": u8 = "))
        .map(|(_, value)| value.trim_end_matches(';').to_owned())
        .collect();
    assert!(codes.len() >= 10, "{codes:?}");
    let page = page();
    let listed: BTreeSet<String> = tags(&section(&page, "EXIT STATUS"))
        .iter()
        .map(|t| t.split(' ').next().unwrap().to_owned())
        .collect();
    let expected: BTreeSet<String> = codes.into_iter().collect();
    assert_eq!(listed, expected);
}

#[test]
fn man_page_names_every_configuration_variable_of_the_key_table() {
    let source = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/config/layers.rs"),
    )
    .unwrap();
    let table = source
        .split_once("const KEYS: &[&str] = &[")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(keys, _)| keys)
        .expect("the key table in layers.rs");
    let keys: Vec<&str> = table
        .lines()
        .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
        .filter(|l| !l.is_empty())
        .collect();
    assert!(keys.len() > 30, "{keys:?}");
    let page = page();
    let listed: BTreeSet<String> = tags(&section(&page, "ENVIRONMENT")).into_iter().collect();
    for key in keys {
        let name = format!("AUTOGPT_SHIM_{}", key.to_ascii_uppercase());
        assert!(listed.contains(&name), "{name} is missing");
    }
    for variable in autogpt_shim::config::environment_variables() {
        assert!(listed.contains(&variable.name), "{}", variable.name);
    }
    for name in [
        "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE",
        "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE",
        "AUTOGPT_SHIM_FALLBACK_DIR",
        "AUTOGPT_SHIM_CA_FILE",
    ] {
        assert!(listed.contains(name), "{name} is missing");
    }
}

#[test]
fn man_page_has_every_section_and_a_command_section_per_command() {
    let page = page();
    for heading in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "COMMANDS",
        "ENVIRONMENT",
        "FILES",
        "EXIT STATUS",
        "SEE ALSO",
    ] {
        assert!(page.contains(&format!("\n.SH {heading}\n")), "{heading}");
    }
    for spec in table().into_iter().skip(1) {
        assert!(
            page.contains(&format!("\n.SS \"{}\"\n", spec.name.replace('-', "\\-"))),
            "{}",
            spec.name
        );
    }
    assert!(page.contains("\n.SH NAME\nautogpt\\-shim \\- "));
    let files = plain(&section(&page, "FILES").join("\n"));
    for path in [
        "~/.config/autogpt-local-executor/config.toml",
        "~/.local/state/autogpt-local-executor/audit.log",
        "~/.local/state/autogpt-local-executor/tokens.enc",
        "~/.config/systemd/user/autogpt-shim.service",
        "/usr/lib/systemd/user/autogpt-shim.service",
    ] {
        assert!(files.contains(path), "{path} in\n{files}");
    }
}

#[test]
fn man_page_date_is_the_day_of_source_date_epoch_or_none() {
    let undated = page();
    assert!(
        undated.contains("\n.TH \"AUTOGPT\\-SHIM\" 1 \"\" "),
        "{undated}"
    );
    assert_eq!(undated, page(), "the same binary prints the same page");

    let out = manpage(Some("1700000000"));
    assert_eq!(out.status.code(), Some(0));
    let dated = String::from_utf8(out.stdout).unwrap();
    assert!(dated.contains("\n.TH \"AUTOGPT\\-SHIM\" 1 \"2023\\-11\\-14\" "));

    let out = manpage(Some("yesterday"));
    assert_eq!(out.status.code(), Some(78));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "autogpt-shim: SOURCE_DATE_EPOCH is not a whole number of seconds since 1970\n"
    );
}

#[test]
fn man_finds_nothing_to_warn_about_in_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("autogpt-shim.1");
    std::fs::write(&file, page()).unwrap();
    // The check lintian runs on packaged pages.
    let out = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
        .arg(&file)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C.UTF-8")
        .env("MANWIDTH", "80")
        .env("MANROFFSEQ", "")
        .output()
        .expect("man (Debian package man-db, with groff-base) is required for this test");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(!out.stdout.is_empty());
}
