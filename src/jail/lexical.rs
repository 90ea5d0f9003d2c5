//! Layer 1 of the jail: lexical normalisation, `~` expansion and the shape
//! checks (JAIL.md §3.2–§3.3, §6.2). Pure string work plus one read of the
//! password database for `~name`; no other filesystem access.
//!
//! Nothing here may change what a path means beyond what the specification
//! lists: no Unicode normalisation, no case folding, no look-alike mapping,
//! and `..` is never collapsed lexically (that is the decision layer's job,
//! done physically).

use std::path::{Path, PathBuf};

use super::Rejection;

/// Longest accepted path in Unicode scalar values (Linux/WSL2 limit).
pub const MAX_PATH_CHARS: usize = 4096;
/// Longest accepted path in UTF-8 bytes (kernel `PATH_MAX` minus the NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest accepted component in bytes (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// POSIX lexical normalisation as JAIL.md §3.2: runs of `/` collapse (but
/// exactly two leading slashes stay `//`), `.` components and trailing slashes
/// go, `..` stays, and the empty string becomes `.`.
pub fn normalize(wire: &str) -> String {
    let leading = wire.bytes().take_while(|&b| b == b'/').count();
    let prefix = match leading {
        0 => "",
        2 => "//",
        _ => "/",
    };
    let parts: Vec<&str> = wire
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let joined = parts.join("/");
    let out = format!("{prefix}{joined}");
    if out.is_empty() { ".".to_owned() } else { out }
}

/// Where home directories come from for `~` expansion.
#[derive(Debug, Clone)]
pub struct Homes {
    /// `$HOME` as the daemon saw it at start (`None` when unset or empty).
    pub home: Option<PathBuf>,
    /// The password database consulted for `~name` (and for `~` without
    /// `HOME`). Reading the file directly matches what a static musl build's
    /// `getpwnam` does; NSS-only users cannot be expanded.
    pub passwd_file: PathBuf,
}

impl Default for Homes {
    fn default() -> Self {
        Self {
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            passwd_file: PathBuf::from("/etc/passwd"),
        }
    }
}

impl Homes {
    fn own_home(&self) -> Option<String> {
        if let Some(home) = &self.home {
            return home.to_str().map(str::to_owned);
        }
        let uid = rustix::process::geteuid().as_raw();
        self.passwd_lookup(|_, entry_uid| entry_uid == Some(uid))
    }

    fn user_home(&self, name: &str) -> Option<String> {
        self.passwd_lookup(|entry_name, _| entry_name == name)
    }

    /// Scans `name:pw:uid:gid:gecos:home:shell` lines for the first match.
    fn passwd_lookup(&self, wanted: impl Fn(&str, Option<u32>) -> bool) -> Option<String> {
        let text = read_small(&self.passwd_file)?;
        text.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() < 7 {
                return None;
            }
            let uid = fields[2].parse::<u32>().ok();
            (wanted(fields[0], uid) && !fields[5].is_empty()).then(|| fields[5].to_owned())
        })
    }
}

/// Reads a text file of at most 16 MiB (the password database is tiny; the
/// bound keeps a hostile replacement from exhausting memory).
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(16 << 20).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Expands a leading `~` or `~name` of an already normalised path (only the
/// first component is considered; `a/~/b` is literal).
pub fn expand_tilde(normalized: &str, homes: &Homes) -> Result<String, Rejection> {
    if !normalized.starts_with('~') {
        return Ok(normalized.to_owned());
    }
    let (first, rest) = match normalized.split_once('/') {
        Some((first, rest)) => (first, Some(rest)),
        None => (normalized, None),
    };
    let home = if first == "~" {
        homes.own_home()
    } else {
        homes.user_home(&first[1..])
    };
    let Some(home) = home else {
        return Err(Rejection::invalid_chars(format!(
            "Bad path: cannot determine the home directory for {first:?}"
        )));
    };
    Ok(match rest {
        Some(rest) if home.ends_with('/') => format!("{home}{rest}"),
        Some(rest) => format!("{home}/{rest}"),
        None => home,
    })
}

/// The shape checks of JAIL.md §6.2 step 3, on the normalised, expanded path.
pub fn check_shape(path: &str) -> Result<(), Rejection> {
    if path.contains('\0') {
        return Err(Rejection::invalid_chars(
            "Path contains a NUL character".to_owned(),
        ));
    }
    if path.chars().nth(MAX_PATH_CHARS).is_some() {
        return Err(Rejection::invalid_chars(format!(
            "Path is longer than {MAX_PATH_CHARS} characters"
        )));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(Rejection::invalid_chars(format!(
            "Path is longer than {MAX_PATH_BYTES} bytes"
        )));
    }
    if path.split('/').any(|c| c.len() > MAX_NAME_BYTES) {
        return Err(Rejection::invalid_chars(format!(
            "A path component is longer than {MAX_NAME_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_follows_posix_rules() {
        let cases = [
            ("", "."),
            (".", "."),
            ("/", "/"),
            ("//", "//"),
            ("///", "/"),
            ("//w/f.txt", "//w/f.txt"),
            ("///w//f.txt", "/w/f.txt"),
            ("a/b/", "a/b"),
            ("a/b/.", "a/b"),
            ("/w/./x/../y", "/w/x/../y"),
            ("./..", ".."),
            ("/w/f.txt/", "/w/f.txt"),
            ("~/x", "~/x"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input:?}");
        }
    }

    fn homes(home: Option<&str>, passwd: &str) -> (Homes, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("passwd");
        std::fs::write(&file, passwd).unwrap();
        (
            Homes {
                home: home.map(PathBuf::from),
                passwd_file: file,
            },
            dir,
        )
    }

    #[test]
    fn tilde_expands_from_home_then_password_database() {
        let (h, _d) = homes(
            Some("/home/alice"),
            "root:x:0:0:root:/root:/bin/sh\nbob:x:1001:1001::/srv/bob:/bin/sh\n",
        );
        assert_eq!(expand_tilde("~", &h).unwrap(), "/home/alice");
        assert_eq!(expand_tilde("~/x/y", &h).unwrap(), "/home/alice/x/y");
        assert_eq!(expand_tilde("~bob/x", &h).unwrap(), "/srv/bob/x");
        assert_eq!(expand_tilde("a/~/b", &h).unwrap(), "a/~/b");
        let err = expand_tilde("~nosuchuser/x", &h).unwrap_err();
        assert_eq!(err.kind, crate::jail::RejectionKind::InvalidPath);
    }

    #[test]
    fn shape_checks_count_chars_bytes_and_components() {
        assert!(check_shape("/w/a\0b").is_err());
        assert!(check_shape(&format!("/{}", "a".repeat(4095))).is_err()); // 4096 chars but 4096 bytes
        assert!(check_shape(&format!("/w/{}", "b".repeat(255))).is_ok());
        assert!(check_shape(&format!("/w/{}", "b".repeat(256))).is_err());
        // 21 components of 100 'é' (200 bytes each): ~2100 chars, ~4200 bytes.
        let long = format!("/w{}", format!("/{}", "é".repeat(100)).repeat(21));
        assert!(long.chars().count() < MAX_PATH_CHARS);
        assert!(check_shape(&long).is_err());
        let too_many_chars = "é".repeat(4097);
        assert!(check_shape(&too_many_chars).is_err());
    }
}
