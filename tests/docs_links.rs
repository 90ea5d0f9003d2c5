//! The user documentation stands on its own and keeps up with the code:
//! every relative link in README.md, SECURITY.md, docs/ and the audit
//! vectors' README reaches a file (and heading) inside the repository, none
//! names the specification outside it, and the reference pages list every
//! exit code, configuration key and wire error code the code has.
//!
//! The lists are read from the source files that own them (src/exit.rs, the
//! key table of src/config/layers.rs, the error-code enum of
//! src/protocol/types.rs) and each reading is checked against the crate's
//! public API, so a change to either side fails here rather than leaving a
//! page behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use autogpt_shim::config::{self, ConfigError, Context, Environment, Host, Overrides, Platform};
use autogpt_shim::exit;
use autogpt_shim::protocol::ErrorCode;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The user-facing Markdown files: README.md, SECURITY.md, every page in
/// docs/, and the audit vectors' README.
fn user_docs() -> Vec<PathBuf> {
    let root = repo();
    let mut docs = vec![
        root.join("README.md"),
        root.join("SECURITY.md"),
        root.join("audit-vectors/README.md"),
    ];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 5, "docs/ lost its pages: {pages:?}");
    docs.extend(pages);
    docs
}

/// The text of a Markdown file outside fenced code blocks, with inline code
/// spans blanked (a link shown as code is not a link).
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `[text](target)` in `markdown`.
fn link_targets(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' | '-' => Some('-'),
            '_' => Some('_'),
            c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading of a Markdown file.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            let base = slug(&heading.replace('`', ""));
            let mut anchor = base.clone();
            let mut n = 0;
            while !found.insert(anchor.clone()) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
        }
    }
    found
}

fn is_external(target: &str) -> bool {
    target.starts_with("https://") || target.starts_with("http://") || target.starts_with("mailto:")
}

#[test]
fn every_relative_link_in_the_user_docs_reaches_a_file_inside_the_repository() {
    let root = repo().canonicalize().unwrap();
    let mut checked = 0;
    for doc in user_docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let here = doc.parent().unwrap();
        for target in link_targets(&text) {
            if is_external(&target) {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            assert!(
                !file.starts_with('/') && !file.contains('\\'),
                "{}: link {target:?} is not a relative path",
                doc.display()
            );
            let resolved = if file.is_empty() {
                doc.clone()
            } else {
                here.join(file)
            };
            let resolved = resolved.canonicalize().unwrap_or_else(|e| {
                panic!("{}: link {target:?} reaches nothing: {e}", doc.display())
            });
            assert!(
                resolved.starts_with(&root),
                "{}: link {target:?} leaves the repository ({})",
                doc.display(),
                resolved.display()
            );
            if let Some(fragment) = fragment {
                let page = std::fs::read_to_string(&resolved).unwrap_or_default();
                assert!(
                    anchors(&page).contains(fragment),
                    "{}: link {target:?}: {} has no heading #{fragment}",
                    doc.display(),
                    resolved.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} relative links found");
}

#[test]
fn no_user_doc_names_a_document_outside_the_repository() {
    let outside = [
        "shared/",
        "spec/",
        "PROTOCOL.md",
        "AUDIT.md",
        "CLI.md",
        "AUTH.md",
        "JAIL.md",
        "CONTROL.md",
        "EXEC.md",
        "FILES.md",
        "CAPABILITIES.md",
    ];
    for doc in user_docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for name in outside {
            assert!(
                !text.contains(name),
                "{} names {name:?}, which is not part of the repository",
                doc.display()
            );
        }
    }
}

/// `pub const NAME: u8 = N;` of src/exit.rs.
fn exit_constants() -> Vec<(String, u8)> {
    read("src/exit.rs")
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("pub const ")?;
            let (name, value) = rest.split_once(": u8 = ")?;
            let value = value.strip_suffix(';')?.parse().ok()?;
            Some((name.to_owned(), value))
        })
        .collect()
}

#[test]
fn every_exit_code_is_documented_and_every_documented_code_exists() {
    let constants = exit_constants();
    // The reading matches the crate's constants.
    for (name, value) in [
        ("SUCCESS", exit::SUCCESS),
        ("NEGATIVE_RESULT", exit::NEGATIVE_RESULT),
        ("USAGE", exit::USAGE),
        ("EX_UNAVAILABLE", exit::EX_UNAVAILABLE),
        ("EX_SOFTWARE", exit::EX_SOFTWARE),
        ("EX_CANTCREAT", exit::EX_CANTCREAT),
        ("EX_TEMPFAIL", exit::EX_TEMPFAIL),
        ("EX_PROTOCOL", exit::EX_PROTOCOL),
        ("EX_NOPERM", exit::EX_NOPERM),
        ("EX_CONFIG", exit::EX_CONFIG),
    ] {
        assert!(
            constants.contains(&(name.to_owned(), value)),
            "src/exit.rs read as {constants:?}"
        );
    }

    let page = read("docs/exit-codes.md");
    let codes_table: BTreeSet<u8> = page
        .lines()
        .skip_while(|line| !line.starts_with("## The codes"))
        .take_while(|line| !line.starts_with("## Every command"))
        .filter_map(|line| line.strip_prefix("| ")?.split(' ').next()?.parse().ok())
        .collect();
    let numbers: BTreeSet<u8> = constants.iter().map(|(_, value)| *value).collect();
    assert_eq!(codes_table, numbers, "the table of docs/exit-codes.md");
    for (name, _) in constants.iter().filter(|(name, _)| name.starts_with("EX_")) {
        assert!(
            page.contains(&format!("`{name}`")),
            "docs/exit-codes.md does not name {name}"
        );
    }
}

/// The keys of the `KEYS` table in src/config/layers.rs.
fn configuration_keys() -> Vec<String> {
    let source = read("src/config/layers.rs");
    let start = source.find("KEYS: &[&str] = &[").expect("the KEYS table");
    let table = &source[start..];
    let table = &table[..table.find("];").expect("the end of the KEYS table")];
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let key = line.trim().strip_prefix('"')?.strip_suffix("\",")?;
            Some(key.to_owned())
        })
        .collect()
}

/// Loads the configuration with one override in a home of its own; the
/// error, if any.
fn load_with(home: &Path, key: &str, value: &str) -> Option<ConfigError> {
    let home_text = home.display().to_string();
    let ctx = Context {
        env: Environment::from_pairs([("HOME", home_text.as_str())]),
        cwd: Some(home.to_path_buf()),
        host: Host {
            platform: Some(Platform::Linux),
            os_name: "linux".into(),
            machine: "x86_64".into(),
            hostname: "docs-host".into(),
        },
    };
    let overrides = Overrides {
        settings: vec![(key.to_owned(), value.to_owned())],
        ..Overrides::default()
    };
    config::load(&overrides, &ctx).err()
}

fn is_unknown_key(error: &Option<ConfigError>) -> bool {
    matches!(error, Some(ConfigError::UnknownOverride { .. }))
}

/// The backticked first cells of the tables under `## Keys`.
fn documented_keys(page: &str) -> BTreeSet<String> {
    page.lines()
        .skip_while(|line| !line.starts_with("## Keys"))
        .take_while(|line| !line.starts_with("## Options that are not keys"))
        .filter_map(|line| {
            let cell = line.strip_prefix("| `")?;
            Some(cell[..cell.find('`')?].to_owned())
        })
        .collect()
}

#[test]
fn every_configuration_key_is_documented_and_every_documented_key_exists() {
    let home = tempfile::tempdir().unwrap();
    let keys = configuration_keys();
    assert!(keys.len() >= 30, "src/config/layers.rs read as {keys:?}");
    assert!(is_unknown_key(&load_with(home.path(), "not_a_key", "1")));

    let page = read("docs/configuration.md");
    let documented = documented_keys(&page);
    for key in &keys {
        assert!(
            !is_unknown_key(&load_with(home.path(), key, "1")),
            "{key} read from src/config/layers.rs is not a key"
        );
        let row = format!("| `{key}` | `AUTOGPT_SHIM_{}`", key.to_ascii_uppercase());
        assert!(
            documented.contains(key) && page.contains(&row),
            "docs/configuration.md has no row {row:?}"
        );
    }
    for key in &documented {
        assert!(
            !is_unknown_key(&load_with(home.path(), key, "1")),
            "docs/configuration.md documents {key}, which is not a key"
        );
    }
}

/// The wire spellings of the `ErrorCode` enum in src/protocol/types.rs.
fn error_codes() -> Vec<String> {
    let source = read("src/protocol/types.rs");
    let start = source
        .find("pub enum ErrorCode {")
        .expect("the ErrorCode enum");
    let body = &source[start..];
    let body = &body[..body.find('}').expect("the end of the ErrorCode enum")];
    body.lines()
        .filter_map(|line| {
            let (_, spelling) = line.split_once("= \"")?;
            Some(spelling.strip_suffix("\",")?.to_owned())
        })
        .collect()
}

#[test]
fn every_wire_error_code_is_in_the_protocol_overview() {
    let codes = error_codes();
    assert!(codes.len() >= 30, "src/protocol/types.rs read as {codes:?}");
    let page = read("docs/protocol.md");
    for code in &codes {
        assert!(
            ErrorCode::parse(code).is_some(),
            "{code} read from src/protocol/types.rs is not an error code"
        );
        assert!(
            page.contains(&format!("`{code}`")),
            "docs/protocol.md does not list {code}"
        );
    }
}
