//! `machine_id` detection, exactly per PROTOCOL.md §4.2.1.
//!
//! The platform keys machine ownership and root grants on this value, so it
//! must match what the reference produces on the same machine byte for byte.
//! The formatting and parsing steps are pure functions; the file locations
//! are injected ([`MachineIdSources`]) so tests never touch the real machine.
//! This module never changes an existing id: it writes only when the fallback
//! file is missing (or empty), and never fails detection because of a write.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::file::read_small_file;
use crate::protocol::hello_rules::{HelloField, MAX_MACHINE_ID_CHARS, is_machine_id_char};

/// Id files are tiny; anything larger is not an id.
const MAX_ID_FILE_BYTES: u64 = 4096;

/// Where detection looks. [`MachineIdSources::system`] gives the real
/// locations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineIdSources {
    /// Linux/WSL2 id files, in order (ignored on other OSes, whose ids come
    /// from `ioreg` or the registry).
    pub linux_files: Vec<PathBuf>,
    /// `~/.autogpt-local-executor-machine-id`.
    pub fallback_file: PathBuf,
    /// The host name, the prefix of a generated id.
    pub hostname: String,
}

impl MachineIdSources {
    /// The real sources for a user whose fallback file is `fallback_file`.
    pub fn system(fallback_file: PathBuf, hostname: &str) -> MachineIdSources {
        MachineIdSources {
            linux_files: vec![
                PathBuf::from("/etc/machine-id"),
                PathBuf::from("/var/lib/dbus/machine-id"),
            ],
            fallback_file,
            hostname: hostname.to_owned(),
        }
    }
}

/// Detects the machine id (steps 2–5; step 1, a configured value, is the
/// caller's). Fails only when an id must be generated and the OS random
/// number generator fails.
pub fn detect(sources: &MachineIdSources) -> Result<String, ConfigError> {
    match os_machine_id(sources) {
        Some(id) => Ok(id),
        None => fallback(&sources.fallback_file, &sources.hostname),
    }
}

/// The id [`detect`] would settle on without creating or writing anything
/// (for `doctor`): the OS's id, else the fallback file's content. `None`
/// when an id would have to be generated first.
pub fn existing(sources: &MachineIdSources) -> Option<String> {
    os_machine_id(sources).or_else(|| {
        let file = &sources.fallback_file;
        fs::metadata(file)
            .is_ok_and(|m| m.is_file())
            .then(|| read_small_text(file))
            .flatten()
            .map(|text| py_strip(&text).to_owned())
            .filter(|id| !id.is_empty())
    })
}

#[cfg(target_os = "macos")]
fn os_machine_id(_sources: &MachineIdSources) -> Option<String> {
    let output = command::run_with_timeout(
        Path::new("/usr/sbin/ioreg"),
        &["-rd1", "-c", "IOPlatformExpertDevice"],
        std::time::Duration::from_secs(5),
    )?;
    parse_ioreg_output(&output)
}

#[cfg(windows)]
fn os_machine_id(_sources: &MachineIdSources) -> Option<String> {
    // `reg.exe` by absolute path so a planted `reg.exe` on PATH is not run.
    let root = std::env::var_os("SystemRoot").unwrap_or_else(|| "C:\\Windows".into());
    let reg = Path::new(&root).join("System32").join("reg.exe");
    let output = command::run_with_timeout(
        &reg,
        &[
            "query",
            "HKLM\\SOFTWARE\\Microsoft\\Cryptography",
            "/v",
            "MachineGuid",
        ],
        std::time::Duration::from_secs(5),
    )?;
    parse_reg_query_output(&output)
}

#[cfg(not(any(target_os = "macos", windows)))]
fn os_machine_id(sources: &MachineIdSources) -> Option<String> {
    linux_machine_id(&sources.linux_files)
}

/// Step 3: the first file whose trimmed content is non-empty, formatted.
pub fn linux_machine_id(files: &[PathBuf]) -> Option<String> {
    files
        .iter()
        .filter_map(|file| read_small_text(file))
        .find_map(|content| format_linux_machine_id(&content))
}

/// Formats the content of a Linux id file: trimmed; when it is 32 hex digits
/// once `-` is removed and lower-cased, the lower-case `8-4-4-4-12` UUID form;
/// otherwise the trimmed content unchanged. `None` when it is blank.
pub fn format_linux_machine_id(content: &str) -> Option<String> {
    let trimmed = py_strip(content);
    if trimmed.is_empty() {
        return None;
    }
    let hex: String = trimmed.replace('-', "").to_lowercase();
    if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        ));
    }
    Some(trimmed.to_owned())
}

/// Step 2: the value of the first `IOPlatformUUID` line of `ioreg` output:
/// the text after its first `=`, whitespace-trimmed, surrounding `"`
/// removed, lower-cased. `None` when there is no such line or it is empty.
pub fn parse_ioreg_output(output: &str) -> Option<String> {
    let line = output.lines().find(|l| l.contains("IOPlatformUUID"))?;
    let (_, value) = line.split_once('=')?;
    let value = py_strip(value).trim_matches('"').to_lowercase();
    (!value.is_empty()).then_some(value)
}

/// Step 4: the `MachineGuid` value from `reg query` output (a line
/// `MachineGuid  REG_SZ  <value>`), lower-cased.
pub fn parse_reg_query_output(output: &str) -> Option<String> {
    output.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let name = fields.next()?;
        let kind = fields.next()?;
        let value = fields.next()?;
        (name.eq_ignore_ascii_case("MachineGuid") && kind == "REG_SZ" && fields.next().is_none())
            .then(|| value.to_lowercase())
    })
}

/// Step 5: the fallback file's trimmed content when it is a regular file;
/// otherwise a generated `<hostname>-<uuid v4>`, written to the file without
/// a trailing newline. The generated value is used even when it cannot be
/// written.
pub fn fallback(file: &Path, hostname: &str) -> Result<String, ConfigError> {
    let existing = if fs::metadata(file).is_ok_and(|m| m.is_file()) {
        read_small_text(file).map(|text| py_strip(&text).to_owned())
    } else {
        None
    };
    if let Some(id) = &existing {
        if !id.is_empty() {
            return Ok(id.clone());
        }
    }
    let generated = generated_id(hostname, &new_uuid_v4()?);
    if existing.is_some() {
        // An empty id file would make every process invent its own id;
        // filling it makes the next one stable. Failure is tolerated.
        let _ = fs::write(file, generated.as_bytes());
        return Ok(generated);
    }
    match create_new(file, &generated) {
        Ok(()) => Ok(generated),
        // Another process created it first: use its id so both agree.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(read_small_text(file)
            .map(|text| py_strip(&text).to_owned())
            .filter(|id| !id.is_empty())
            .unwrap_or(generated)),
        Err(_) => Ok(generated),
    }
}

/// `<hostname>-<uuid>` as the reference makes it, whenever the platform
/// accepts that; otherwise the host name's refused characters become `-`,
/// its leading non-alphanumerics are dropped and it is cut so the whole id
/// fits, and with nothing left the id is the UUID alone. So an id this
/// shim invents is always one the platform accepts.
fn generated_id(hostname: &str, uuid: &str) -> String {
    let reference = format!("{hostname}-{uuid}");
    if HelloField::MachineId.accepts(&reference) {
        return reference;
    }
    let room = MAX_MACHINE_ID_CHARS - uuid.len() - 1;
    let host: String = hostname
        .chars()
        .map(|c| if is_machine_id_char(c) { c } else { '-' })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(room)
        .collect();
    if host.is_empty() {
        uuid.to_owned()
    } else {
        format!("{host}-{uuid}")
    }
}

/// Creates `file` (never replacing an existing one) holding `content`.
fn create_new(file: &Path, content: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(file)?;
    f.write_all(content.as_bytes())
}

/// The content of a small UTF-8 file; `None` when it cannot be read, is not
/// UTF-8 or is too large to be an id.
fn read_small_text(path: &Path) -> Option<String> {
    String::from_utf8(read_small_file(path, MAX_ID_FILE_BYTES).ok()?).ok()
}

/// A random UUID version 4 in canonical lower-case form.
pub fn new_uuid_v4() -> Result<String, ConfigError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| ConfigError::Randomness)?;
    Ok(crate::protocol::uuid_v4_from_bytes(bytes))
}

/// Python's `str.strip()`: trims what `str.isspace()` calls whitespace, which
/// is Unicode `White_Space` plus the ASCII information separators
/// U+001C–U+001F. Used wherever the reference strips, so results match it.
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Running a probe program with a deadline (macOS `ioreg`, Windows `reg`).
#[cfg(any(target_os = "macos", windows, test))]
mod command {
    use std::io::Read;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// More than any id query prints; output past it is not read.
    const MAX_OUTPUT_BYTES: u64 = 1024 * 1024;

    /// Runs `program` with `args`, no stdin, and returns its stdout (lossily
    /// decoded) if it exits within `timeout`; kills it otherwise.
    pub(super) fn run_with_timeout(
        program: &Path,
        args: &[&str],
        timeout: Duration,
    ) -> Option<String> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        };
        // Reading on another thread keeps a chatty child from blocking on a
        // full pipe while this thread watches the clock.
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.take(MAX_OUTPUT_BYTES).read_to_end(&mut out);
            out
        });
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
        let out = reader.join().ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    #[cfg(all(test, unix))]
    mod tests {
        use super::*;

        #[test]
        fn probe_output_is_returned() {
            let out = run_with_timeout(
                Path::new("/bin/sh"),
                &["-c", "echo hi"],
                Duration::from_secs(5),
            );
            assert_eq!(out.as_deref(), Some("hi\n"));
        }

        #[test]
        fn probe_past_its_deadline_is_killed() {
            let start = Instant::now();
            let out = run_with_timeout(
                Path::new("/bin/sh"),
                &["-c", "exec sleep 5"],
                Duration::from_millis(100),
            );
            assert_eq!(out, None);
            assert!(start.elapsed() < Duration::from_secs(4));
        }

        #[test]
        fn missing_probe_program_yields_nothing() {
            let out =
                run_with_timeout(Path::new("/nonexistent/ioreg"), &[], Duration::from_secs(1));
            assert_eq!(out, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "0f3c2d1e-aaaa-4bbb-8ccc-0123456789ab";

    #[test]
    fn a_generated_id_is_the_reference_one_when_the_platform_accepts_it() {
        assert_eq!(
            generated_id("laptop.local", UUID),
            format!("laptop.local-{UUID}")
        );
    }

    #[test]
    fn a_generated_id_always_satisfies_the_platform_rule() {
        for host in [
            "",
            "-dash",
            "..",
            "has space",
            "ünï<cøde>",
            "\u{1b}[31m",
            &"h".repeat(300),
        ] {
            let id = generated_id(host, UUID);
            assert!(HelloField::MachineId.accepts(&id), "{host:?} -> {id:?}");
            assert!(id.ends_with(UUID), "{id}");
        }
        assert_eq!(generated_id("", UUID), UUID);
        assert_eq!(generated_id("has space", UUID), format!("has-space-{UUID}"));
    }
}
