//! The manual page `autogpt-shim(1)` in roff (`autogpt-shim manpage`),
//! generated from the command table in `catalog.rs` plus a few fixed
//! sections.
//!
//! The commands, options and arguments come from the table the parser
//! checks and the help is printed from; the environment variables from the
//! configuration's own key table ([`environment_variables`]); the files
//! from the per-OS paths ([`OsPaths`]); the exit status numbers from
//! [`crate::exit`]. So the page cannot list an option the binary refuses or
//! miss one it takes.
//!
//! It only produces text and reads nothing: the date in the header is passed
//! in (the caller takes it from `SOURCE_DATE_EPOCH`), so the same binary
//! always prints the same page for the same date, as reproducible release
//! builds need.

use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::path::Path;

use super::catalog::{COMMAND_TABLE, CommandSpec, HELP, OptionSpec};
use super::help::{is_built, sentence};
use super::{BANNER, PROGRAM, VERSION};
use crate::config::{Environment, OsPaths, VariableRole, environment_variables};
use crate::exit;
use crate::timefmt::civil_utc;

/// The manual section of the page.
pub const SECTION: u8 = 1;

/// The exit codes with their `sysexits.h` names and what they mean, in the
/// order of [`crate::exit`].
const EXIT_CODES: &[(u8, &str, &str)] = &[
    (exit::SUCCESS, "", "success; also --help and --version"),
    (
        exit::NEGATIVE_RESULT,
        "",
        "a negative result: the command ran and the answer is no (violations found, \
         no such record, nothing to export, revocation incomplete, audit log missing)",
    ),
    (
        exit::USAGE,
        "",
        "a usage error: unknown command or option, missing or invalid value or argument; \
         also the audit commands when the audit key cannot be loaded",
    ),
    (
        exit::EX_UNAVAILABLE,
        "EX_UNAVAILABLE",
        "auth cannot reach the token endpoint or gets a 5xx answer; install and uninstall \
         on a system without autostart support",
    ),
    (
        exit::EX_SOFTWARE,
        "EX_SOFTWARE",
        "an internal error, a bug in the shim: please report it",
    ),
    (
        exit::EX_CANTCREAT,
        "EX_CANTCREAT",
        "an output cannot be created: the autostart entry of install, the archive of \
         audit export (also when it exists already)",
    ),
    (
        exit::EX_TEMPFAIL,
        "EX_TEMPFAIL",
        "a temporary failure, trying again later may work: auth found no free callback \
         port or got no callback in time; audit rotate while a running daemon holds the log",
    ),
    (
        exit::EX_PROTOCOL,
        "EX_PROTOCOL",
        "auth received a token response it cannot use",
    ),
    (
        exit::EX_NOPERM,
        "EX_NOPERM",
        "the platform refused this machine's credentials or this machine: run auth again \
         or fix the binding on the platform; a service manager should not restart on it",
    ),
    (
        exit::EX_CONFIG,
        "EX_CONFIG",
        "something local needs fixing: the configuration, the secret store, the audit log, \
         a capability this build does not have, a value the platform does not accept, or a \
         failed doctor check; a service manager should not restart on it",
    ),
];

/// Variables without the `AUTOGPT_SHIM_` prefix that the shim reads.
const OTHER_VARIABLES: &[(&str, &str)] = &[
    (
        "HOME",
        "the home folder; it must be an absolute path, or every command stops with exit 78",
    ),
    (
        "XDG_CONFIG_HOME, XDG_STATE_HOME",
        "the base folders of the configuration and of the state; ignored when empty or \
         relative",
    ),
    (
        "CREDENTIALS_DIRECTORY",
        "set by systemd: the passphrase of tokens.enc is read from its \
         autogpt-shim-passphrase file when AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE is not set",
    ),
    (
        "https_proxy, HTTPS_PROXY",
        "an http:// proxy, with optional user:password@, for the connections to the \
         platform (HTTP CONNECT; TLS stays end to end); the lower-case spelling wins",
    ),
    (
        "no_proxy, NO_PROXY",
        "comma-separated host names (with their subdomains), IP addresses or * that bypass \
         the proxy; loopback hosts always do",
    ),
    (
        "TZ",
        "the time zone of the local times that audit tail and audit show print",
    ),
    (
        "SOURCE_DATE_EPOCH",
        "read by the manpage command only: the date of this page, in seconds since 1970",
    ),
];

/// `SOURCE_DATE_EPOCH` that is not a whole number of seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidEpoch;

impl fmt::Display for InvalidEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SOURCE_DATE_EPOCH is not a whole number of seconds since 1970")
    }
}

impl std::error::Error for InvalidEpoch {}

/// The page's date, `YYYY-MM-DD` in UTC, from a `SOURCE_DATE_EPOCH` value:
/// ASCII digits only, at most the year 9999.
pub fn date_from_epoch(raw: &OsStr) -> Result<String, InvalidEpoch> {
    let text = raw.to_str().ok_or(InvalidEpoch)?;
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InvalidEpoch);
    }
    let seconds: i64 = text.parse().map_err(|_| InvalidEpoch)?;
    // 9999-12-31T23:59:59Z; later years do not fit the format.
    if seconds > 253_402_300_799 {
        return Err(InvalidEpoch);
    }
    let civil = civil_utc(seconds.saturating_mul(1_000_000));
    Ok(format!(
        "{:04}-{:02}-{:02}",
        civil.year, civil.month, civil.day
    ))
}

/// The whole page; `date` goes into the header, none leaves it empty.
pub fn render(date: Option<&str>) -> String {
    let mut page = String::new();
    let _ = writeln!(
        page,
        ".\\\" {PROGRAM}({SECTION}) {VERSION}: printed by `{PROGRAM} manpage` from the \
         table its --help is made of."
    );
    let _ = writeln!(
        page,
        ".TH {} {SECTION} {} {} \"User Commands\"",
        quoted(&PROGRAM.to_ascii_uppercase()),
        quoted(date.unwrap_or("")),
        quoted(&format!("{PROGRAM} {VERSION}")),
    );
    // No hyphenation: names, keys and paths are typed as printed.
    page.push_str(".nh\n");
    name_and_synopsis(&mut page);
    description(&mut page);
    global_options(&mut page);
    commands(&mut page);
    environment(&mut page);
    files(&mut page);
    exit_status(&mut page);
    see_also(&mut page);
    page
}

fn name_and_synopsis(page: &mut String) {
    page.push_str(".SH NAME\n");
    text_line(page, &format!("{PROGRAM} - {}", COMMAND_TABLE.summary));
    page.push_str(".SH SYNOPSIS\n");
    let _ = writeln!(
        page,
        "{} [{}] {} [{}] [{}]",
        bold(PROGRAM),
        italic("GLOBAL OPTIONS"),
        italic("COMMAND"),
        italic("COMMAND OPTIONS"),
        italic("ARGS")
    );
    page.push_str(".br\n");
    let _ = writeln!(
        page,
        "{} {} | {}",
        bold(PROGRAM),
        bold("--help"),
        bold("--version")
    );
}

fn description(page: &mut String) {
    page.push_str(".SH DESCRIPTION\n");
    text_line(page, env!("CARGO_PKG_DESCRIPTION"));
    // The banner `start` and `auth` print, as one paragraph.
    let warning: Vec<&str> = BANNER
        .lines()
        .map(|l| l.strip_prefix("WARNING: ").unwrap_or(l))
        .collect();
    page.push_str(".PP\n");
    text_line(page, &warning.join(" "));
    for note in COMMAND_TABLE.notes {
        page.push_str(".PP\n");
        text_line(page, note);
    }
    page.push_str(".PP\n");
    text_line(
        page,
        &format!(
            "Every command prints its own help with {PROGRAM} COMMAND --help. \
             The commands and options below are the same as in that help."
        ),
    );
}

fn global_options(page: &mut String) {
    page.push_str(".SH OPTIONS\n");
    text_line(page, "These global options come before the command.");
    option_list(page, &COMMAND_TABLE);
    page.push_str(".TP\n");
    let _ = writeln!(page, "{}", option_tag(&HELP));
    text_line(
        page,
        &format!(
            "{} After a command, or as help COMMAND: that command's help.",
            sentence(HELP.help)
        ),
    );
}

/// The options of `spec` as a tagged list, those this build refuses
/// marked.
fn option_list(page: &mut String, spec: &CommandSpec) {
    for option in spec.options {
        page.push_str(".TP\n");
        let _ = writeln!(page, "{}", option_tag(option));
        let mut help = sentence(option.help);
        if let Some(key) = option.key {
            let _ = write!(help, " Sets the key {key}.");
        }
        if !is_built(option) {
            help.push_str(" Not available in this build: refused with exit 78.");
        }
        text_line(page, &help);
    }
}

/// `\fB-V\fR, \fB--version\fR` or `\fB--config\fR \fIPATH\fR`.
fn option_tag(option: &OptionSpec) -> String {
    let mut tag = String::new();
    if let Some(short) = option.short {
        let _ = write!(tag, "{}, ", bold(&format!("-{short}")));
    }
    tag.push_str(&bold(option.long));
    if let Some(value) = option.value {
        let _ = write!(tag, " {}", italic(value));
    }
    tag
}

fn commands(page: &mut String) {
    page.push_str(".SH COMMANDS\n");
    // Every command below the program itself.
    for spec in COMMAND_TABLE.walk().into_iter().skip(1) {
        command(page, spec);
    }
}

fn command(page: &mut String, spec: &CommandSpec) {
    let _ = writeln!(page, ".SS {}", quoted(spec.name));
    let mut usage = format!("{} [{}] {}", bold(PROGRAM), italic("GLOBAL OPTIONS"), {
        bold(spec.name)
    });
    if !spec.subcommands.is_empty() {
        let _ = write!(usage, " {}", italic("SUBCOMMAND"));
    }
    for option in spec.options.iter().filter(|o| is_built(o)) {
        match option.value {
            Some(value) => {
                let _ = write!(usage, " [{} {}]", bold(option.long), italic(value));
            }
            None => {
                let _ = write!(usage, " [{}]", bold(option.long));
            }
        }
    }
    for arg in spec.args {
        let _ = write!(usage, " {}", italic(arg.name));
    }
    let _ = writeln!(page, "{usage}");
    page.push_str(".PP\n");
    text_line(page, &sentence(spec.summary));
    if !spec.subcommands.is_empty() {
        let words: Vec<&str> = spec.subcommands.iter().map(|c| c.word()).collect();
        page.push_str(".PP\n");
        text_line(
            page,
            &format!("Subcommands (each below): {}.", words.join(", ")),
        );
    }
    for note in spec.notes {
        page.push_str(".PP\n");
        text_line(page, note);
    }
    if !spec.options.is_empty() {
        page.push_str(".PP\nOptions:\n");
        option_list(page, spec);
    }
    if !spec.args.is_empty() {
        page.push_str(".PP\nArguments:\n");
        for arg in spec.args {
            page.push_str(".TP\n");
            let _ = writeln!(page, "{}", italic(arg.name));
            text_line(page, &sentence(arg.help));
        }
    }
    if !spec.examples.is_empty() {
        page.push_str(".PP\nExamples:\n");
        for example in spec.examples {
            page.push_str(".TP\n");
            let _ = writeln!(page, "{}", bold(&format!("{PROGRAM} {}", example.args)));
            text_line(page, &sentence(example.help));
        }
    }
}

fn environment(page: &mut String) {
    page.push_str(".SH ENVIRONMENT\n");
    text_line(
        page,
        "Every configuration key can also be set by a variable: AUTOGPT_SHIM_ followed by \
         the key in upper case. An option on the command line and config.toml both win over \
         the variable; an empty variable counts as unset. A variable with the prefix that \
         the shim does not know is reported as a warning.",
    );
    for variable in environment_variables() {
        page.push_str(".TP\n");
        let _ = writeln!(page, "{}", bold(&variable.name));
        match variable.role {
            VariableRole::Key(key) => {
                let mut help = format!("The key {key}");
                let flags = flags_for(key);
                if !flags.is_empty() {
                    let _ = write!(help, "; the option {} wins over it", flags.join(" or "));
                }
                help.push('.');
                text_line(page, &help);
            }
            VariableRole::Other(help) => text_line(page, &sentence(help)),
        }
    }
    for (name, help) in OTHER_VARIABLES {
        page.push_str(".TP\n");
        let _ = writeln!(page, "{}", bold(name));
        text_line(page, &sentence(help));
    }
}

/// The options that set configuration `key`, each named once.
fn flags_for(key: &str) -> Vec<&'static str> {
    let mut flags = Vec::new();
    for spec in COMMAND_TABLE.walk() {
        for option in spec.options {
            if option.key == Some(key) && !flags.contains(&option.long) {
                flags.push(option.long);
            }
        }
    }
    flags
}

fn files(page: &mut String) {
    // A stand-in home, shown as ~: the page must not depend on who
    // prints it.
    let home = if cfg!(windows) {
        r"C:\Users\user"
    } else {
        "/home/user"
    };
    let env = Environment::from_pairs([("HOME", home), ("USERPROFILE", home)]);
    let Ok(paths) = OsPaths::from_env(&env) else {
        return;
    };
    page.push_str(".SH FILES\n");
    if cfg!(not(any(target_os = "macos", windows))) {
        text_line(
            page,
            "The defaults are shown; ~/.config stands for $XDG_CONFIG_HOME and \
             ~/.local/state for $XDG_STATE_HOME when those are set. Folders the shim \
             creates get mode 0700, files mode 0600.",
        );
    }
    let shown = |path: &Path| match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    };
    let entries = [
        (
            shown(&paths.default_config_file),
            "The configuration; never written by the shim. --config reads another file.",
        ),
        (
            shown(&paths.default_audit_log),
            "The current audit log. The rotated logs (audit.log.YYYYMMDD-HHMMSS) and the tail \
             anchor audit.log.anchor lie beside it; the key audit_log_path moves them all.",
        ),
        (
            shown(&paths.tokens_file()),
            "The encrypted secret store (tokens and audit key), used only where the OS \
             keychain cannot be; AUTOGPT_SHIM_FALLBACK_DIR moves it.",
        ),
        (
            shown(&paths.state_dir.join("daemon.json")),
            "While the daemon runs: its process id, mode and settings, for status. No secret.",
        ),
        (
            shown(&paths.autostart_file),
            "The systemd user unit that install writes and uninstall removes. It takes \
             precedence over a packaged unit of the same name.",
        ),
        (
            "/usr/lib/systemd/user/autogpt-shim.service".to_owned(),
            "The user unit of the Debian package: systemctl --user enable --now \
             autogpt-shim starts the shim at login with the default configuration.",
        ),
        (
            shown(&paths.legacy_audit_key_file),
            "The audit key file of the earlier Python shim: read once to import its key, \
             never written.",
        ),
        (
            shown(&paths.machine_id_file()),
            "The machine id the shim made up where the system has none.",
        ),
        (
            shown(&paths.default_allowed_root),
            "The folder of the legacy --session-id mode when allowed_root is not set.",
        ),
    ];
    for (path, help) in entries {
        page.push_str(".TP\n");
        let _ = writeln!(page, "{}", italic(&path));
        text_line(page, help);
    }
}

fn exit_status(page: &mut String) {
    page.push_str(".SH EXIT STATUS\n");
    text_line(
        page,
        "Every failure is also explained in one line on standard error. Each command's help \
         names the codes it uses.",
    );
    for (code, name, help) in EXIT_CODES {
        page.push_str(".TP\n");
        if name.is_empty() {
            let _ = writeln!(page, "{}", bold(&code.to_string()));
        } else {
            let _ = writeln!(page, "{} ({name})", bold(&code.to_string()));
        }
        text_line(page, &sentence(help));
    }
}

fn see_also(page: &mut String) {
    page.push_str(".SH SEE ALSO\n");
    page.push_str(".BR systemctl (1),\n.BR systemd.unit (5)\n.PP\n");
    text_line(
        page,
        "README.md, SECURITY.md and the docs folder that come with the program; the Debian \
         package installs them in /usr/share/doc/autogpt-shim/. Read SECURITY.md before use.",
    );
}

/// `text` for a roff text line: escaped, and kept from being read as a
/// request when it starts with `.` or `'`.
fn text_line(page: &mut String, text: &str) {
    let escaped = escape(text.trim());
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        page.push_str("\\&");
    }
    page.push_str(&escaped);
    page.push('\n');
}

/// Roff-escaped text: `\` and `-` escaped (`\-` is the ASCII hyphen-minus
/// a reader types), control characters as spaces, other non-ASCII
/// characters as `\[uXXXX]`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c if c.is_ascii_control() || c.is_control() => out.push(' '),
            c if c.is_ascii() => out.push(c),
            c => {
                let _ = write!(out, "\\[u{:04X}]", u32::from(c));
            }
        }
    }
    out
}

fn bold(text: &str) -> String {
    format!("\\fB{}\\fR", escape(text))
}

fn italic(text: &str) -> String {
    format!("\\fI{}\\fR", escape(text))
}

/// A macro argument in double quotes (a `"` inside becomes `""`).
fn quoted(text: &str) -> String {
    format!("\"{}\"", escape(text).replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_comes_from_whole_seconds_only() {
        assert_eq!(date_from_epoch(OsStr::new("0")).unwrap(), "1970-01-01");
        assert_eq!(
            date_from_epoch(OsStr::new("1700000000")).unwrap(),
            "2023-11-14"
        );
        for bad in [
            "",
            "-1",
            "1.5",
            " 1",
            "1e9",
            "99999999999999",
            "253402300800",
        ] {
            assert_eq!(date_from_epoch(OsStr::new(bad)), Err(InvalidEpoch), "{bad}");
        }
    }

    #[test]
    fn text_cannot_become_a_roff_request_or_escape() {
        let mut page = String::new();
        text_line(&mut page, ".SH not a heading");
        text_line(&mut page, "'quoted");
        assert_eq!(page, "\\&.SH not a heading\n\\&'quoted\n");
        assert_eq!(escape(r"a\fB-b"), r"a\efB\-b");
        assert_eq!(escape("a\nb\u{2014}"), "a b\\[u2014]");
    }

    #[test]
    fn every_exit_code_is_explained_once() {
        let mut codes: Vec<u8> = EXIT_CODES.iter().map(|(c, _, _)| *c).collect();
        let count = codes.len();
        codes.dedup();
        assert_eq!(codes.len(), count);
        let page = render(None);
        for (code, _, _) in EXIT_CODES {
            assert!(page.contains(&format!(".TP\n\\fB{code}\\fR")), "{code}");
        }
    }

    #[test]
    fn the_same_date_gives_the_same_page() {
        assert_eq!(render(Some("2024-01-02")), render(Some("2024-01-02")));
        assert!(render(Some("2024-01-02")).contains(".TH \"AUTOGPT\\-SHIM\" 1 \"2024\\-01\\-02\""));
        assert!(render(None).contains(".TH \"AUTOGPT\\-SHIM\" 1 \"\""));
    }
}
