//! The autostart files of CLI.md §9.2–§9.4, rendered from explicit paths: a
//! systemd user unit, a launchd agent property list and a Task Scheduler
//! XML document.
//!
//! Pure functions: nothing here reads the environment, the file system or
//! the clock, so a file holds exactly the values passed in and nothing of
//! the installing user's environment (CLI.md §9.1). Every path is written
//! with the quoting its format needs. A path that a format cannot hold
//! unambiguously is refused, never written in a form that would mean
//! something else: another argument, another directive, another file.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::Platform;

/// `Description=` of the unit and of the task.
pub const DESCRIPTION: &str = "AutoGPT Local PC Executor shim";

/// `Documentation=` of the unit.
pub const DOCUMENTATION: &str = "https://github.com/Significant-Gravitas/autogpt-local-executor";

/// The launchd label.
pub const LAUNCHD_LABEL: &str = "net.autogpt.shim";

/// The Task Scheduler path of the task.
pub const TASK_URI: &str = "\\AutoGPT\\Shim";

/// The variable naming the passphrase file (AUTH.md §10.2 and the
/// `secrets::passphrase` module); the unit sets it to a path, never to the
/// passphrase.
const PASSPHRASE_FILE_VARIABLE: &str = crate::secrets::Passphrase::FILE_VARIABLE;

/// What an autostart entry starts, and where its output goes.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// The absolute path of the `autogpt-shim` binary.
    pub exe: &'a Path,
    /// The config file, passed as `--config`.
    pub config: &'a Path,
    /// The daemon's stdout log (systemd, launchd).
    pub stdout_log: &'a Path,
    /// The daemon's stderr log (systemd, launchd).
    pub stderr_log: &'a Path,
    /// systemd only: the file (mode 0600) the service reads the passphrase
    /// of the encrypted token file from. The unit names the file; the
    /// passphrase itself never appears in it.
    pub passphrase_file: Option<&'a Path>,
}

/// A path that a format cannot hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrepresentable {
    /// Which path: `the executable path`, `the config path`, ….
    pub what: &'static str,
    /// The path.
    pub path: PathBuf,
    /// The format: `a systemd unit`, ….
    pub format: &'static str,
    /// Why, one line.
    pub reason: &'static str,
}

impl fmt::Display for Unrepresentable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} '{}' cannot be written into {}: {}",
            self.what,
            crate::text::one_line(&self.path.to_string_lossy()),
            self.format,
            self.reason
        )
    }
}

impl std::error::Error for Unrepresentable {}

/// The file for `platform`, as the bytes to write: UTF-8 for the unit and
/// the property list, UTF-16LE with a byte-order mark for the task, as its
/// XML declaration says (CLI.md §9.4 hardening note).
pub fn render(platform: Platform, entry: &Entry<'_>) -> Result<Vec<u8>, Unrepresentable> {
    match platform {
        Platform::Linux | Platform::Wsl2 => systemd_unit(entry).map(String::into_bytes),
        Platform::Darwin => launchd_plist(entry).map(String::into_bytes),
        Platform::Windows => task_xml(entry).map(|text| utf16le_with_bom(&text)),
    }
}

// --- systemd -------------------------------------------------------------------

const SYSTEMD: &str = "a systemd unit";

/// The systemd user unit (CLI.md §9.2), with `RestartPreventExitStatus=77
/// 78` and, when given, the passphrase file's path.
pub fn systemd_unit(entry: &Entry<'_>) -> Result<String, Unrepresentable> {
    let exe = systemd_program(entry.exe)?;
    let config = systemd_argument(entry.config, "the config path")?;
    let stdout_log = systemd_value(entry.stdout_log, "the stdout log path")?;
    let stderr_log = systemd_value(entry.stderr_log, "the stderr log path")?;
    let passphrase = entry
        .passphrase_file
        .map(|path| systemd_environment(PASSPHRASE_FILE_VARIABLE, path))
        .transpose()?;

    let mut unit = String::new();
    unit.push_str(
        "# The autostart entry of autogpt-shim, written by `autogpt-shim install`\n\
         # and removed by `autogpt-shim uninstall`.\n\
         [Unit]\n",
    );
    unit.push_str(&format!("Description={DESCRIPTION}\n"));
    unit.push_str(&format!("Documentation={DOCUMENTATION}\n"));
    unit.push_str(
        "After=network-online.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n",
    );
    unit.push_str(&format!("ExecStart={exe} --config {config} start\n"));
    unit.push_str(
        "Restart=on-failure\n\
         RestartSec=5\n\
         # 77: authorize again; 78: fix the configuration. Restarting cannot help.\n\
         RestartPreventExitStatus=77 78\n",
    );
    unit.push_str(&format!("StandardOutput=append:{stdout_log}\n"));
    unit.push_str(&format!("StandardError=append:{stderr_log}\n"));
    if let Some(assignment) = passphrase {
        unit.push_str(
            "# The file holding the passphrase of the encrypted token file; the\n\
             # passphrase itself is never written here.\n",
        );
        unit.push_str(&format!("Environment={assignment}\n"));
    }
    unit.push_str(
        "\n\
         [Install]\n\
         WantedBy=default.target\n",
    );
    Ok(unit)
}

/// The program of `ExecStart=`. systemd refuses a program path holding
/// quotes or backslashes, and never expands variables in it (`$$` would
/// stay two characters), so those are refused; a space is quoted and `%`
/// escaped as the specifier `%%`.
fn systemd_program(path: &Path) -> Result<String, Unrepresentable> {
    let what = "the executable path";
    let text = absolute_text(path, what, SYSTEMD)?;
    if text.contains(['"', '\'', '\\']) {
        return Err(refused(
            path,
            what,
            SYSTEMD,
            "systemd does not run a program whose path holds quotes or backslashes",
        ));
    }
    if text.contains('$') {
        return Err(refused(
            path,
            what,
            SYSTEMD,
            "systemd would treat `$` in the program's name as a variable",
        ));
    }
    let escaped = text.replace('%', "%%");
    Ok(if text.contains(' ') {
        format!("\"{escaped}\"")
    } else {
        escaped
    })
}

/// An argument of `ExecStart=` (systemd.syntax(7) "Quoting",
/// systemd.service(5) "Command lines"). Quoted only when it holds
/// whitespace, quotes, backslashes or `%` (CLI.md §9.1 hardening note), so
/// a plain path reads as itself; inside the quotes `\` and `"` are escaped.
/// `%` is always doubled (a specifier otherwise) and `$` too (a variable
/// otherwise), quoted or not.
fn systemd_argument(path: &Path, what: &'static str) -> Result<String, Unrepresentable> {
    let text = absolute_text(path, what, SYSTEMD)?;
    let mut word = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '%' => word.push_str("%%"),
            '$' => word.push_str("$$"),
            '\\' => word.push_str("\\\\"),
            '"' => word.push_str("\\\""),
            c => word.push(c),
        }
    }
    Ok(if text.contains([' ', '"', '\'', '\\', '%']) {
        format!("\"{word}\"")
    } else {
        word
    })
}

/// A path that makes up the rest of a setting's value (`append:<path>`).
/// systemd takes it literally apart from specifiers, so `%` is doubled;
/// it strips trailing whitespace and joins a line ending in a backslash
/// with the next one, so those endings are refused.
fn systemd_value(path: &Path, what: &'static str) -> Result<String, Unrepresentable> {
    let text = absolute_text(path, what, SYSTEMD)?;
    if text.ends_with([' ', '\\']) {
        return Err(refused(
            path,
            what,
            SYSTEMD,
            "systemd drops a trailing space and joins a line ending in a backslash with the next",
        ));
    }
    Ok(text.replace('%', "%%"))
}

/// `"NAME=<path>"` for `Environment=`: the whole assignment quoted, `\`
/// and `"` escaped inside, `%` doubled. systemd does not expand `$` there.
fn systemd_environment(name: &str, path: &Path) -> Result<String, Unrepresentable> {
    let text = absolute_text(path, "the passphrase file path", SYSTEMD)?;
    let mut quoted = format!("\"{name}=");
    for c in text.chars() {
        match c {
            '%' => quoted.push_str("%%"),
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    Ok(quoted)
}

// --- launchd -------------------------------------------------------------------

const LAUNCHD: &str = "a launchd property list";

/// The launchd agent (CLI.md §9.3): `KeepAlive` as `{SuccessfulExit:
/// false}`, so a failed start is retried and a clean stop is not undone.
pub fn launchd_plist(entry: &Entry<'_>) -> Result<String, Unrepresentable> {
    let text = |path: &Path, what: &'static str| {
        absolute_text(path, what, LAUNCHD).and_then(|t| xml_text(t, path, what, LAUNCHD))
    };
    let exe = text(entry.exe, "the executable path")?;
    let config = text(entry.config, "the config path")?;
    let stdout_log = text(entry.stdout_log, "the stdout log path")?;
    let stderr_log = text(entry.stderr_log, "the stderr log path")?;
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \t<key>Label</key>\n\
         \t<string>{LAUNCHD_LABEL}</string>\n\
         \t<key>ProgramArguments</key>\n\
         \t<array>\n\
         \t\t<string>{exe}</string>\n\
         \t\t<string>--config</string>\n\
         \t\t<string>{config}</string>\n\
         \t\t<string>start</string>\n\
         \t</array>\n\
         \t<key>RunAtLoad</key>\n\
         \t<true/>\n\
         \t<key>KeepAlive</key>\n\
         \t<dict>\n\
         \t\t<key>SuccessfulExit</key>\n\
         \t\t<false/>\n\
         \t</dict>\n\
         \t<key>ProcessType</key>\n\
         \t<string>Background</string>\n\
         \t<key>StandardOutPath</key>\n\
         \t<string>{stdout_log}</string>\n\
         \t<key>StandardErrorPath</key>\n\
         \t<string>{stderr_log}</string>\n\
         </dict>\n\
         </plist>\n"
    ))
}

// --- Task Scheduler ------------------------------------------------------------

const TASK: &str = "a Task Scheduler task";

/// The Task Scheduler document (CLI.md §9.4) as text; [`render`] encodes
/// it as UTF-16LE. `Arguments` is `--config "<config path>" start`.
pub fn task_xml(entry: &Entry<'_>) -> Result<String, Unrepresentable> {
    let exe_what = "the executable path";
    let exe_text = task_text(entry.exe, exe_what)?;
    if exe_text.contains('"') {
        return Err(refused(
            entry.exe,
            exe_what,
            TASK,
            "a program path cannot hold a double quote",
        ));
    }
    let exe = xml_text(exe_text, entry.exe, exe_what, TASK)?;
    let config_what = "the config path";
    let config_text = task_text(entry.config, config_what)?;
    let config = xml_text(
        &windows_quoted(config_text),
        entry.config,
        config_what,
        TASK,
    )?;
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-16\"?>\n\
         <Task version=\"1.4\" xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\">\n\
         \x20 <RegistrationInfo>\n\
         \x20   <Description>{DESCRIPTION}</Description>\n\
         \x20   <URI>{TASK_URI}</URI>\n\
         \x20 </RegistrationInfo>\n\
         \x20 <Triggers>\n\
         \x20   <LogonTrigger>\n\
         \x20     <Enabled>true</Enabled>\n\
         \x20   </LogonTrigger>\n\
         \x20 </Triggers>\n\
         \x20 <Principals>\n\
         \x20   <Principal id=\"Author\">\n\
         \x20     <LogonType>InteractiveToken</LogonType>\n\
         \x20     <RunLevel>LeastPrivilege</RunLevel>\n\
         \x20   </Principal>\n\
         \x20 </Principals>\n\
         \x20 <Settings>\n\
         \x20   <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>\n\
         \x20   <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>\n\
         \x20   <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>\n\
         \x20   <AllowHardTerminate>true</AllowHardTerminate>\n\
         \x20   <StartWhenAvailable>true</StartWhenAvailable>\n\
         \x20   <RunOnlyIfNetworkAvailable>true</RunOnlyIfNetworkAvailable>\n\
         \x20   <IdleSettings>\n\
         \x20     <StopOnIdleEnd>false</StopOnIdleEnd>\n\
         \x20     <RestartOnIdle>false</RestartOnIdle>\n\
         \x20   </IdleSettings>\n\
         \x20   <AllowStartOnDemand>true</AllowStartOnDemand>\n\
         \x20   <Enabled>true</Enabled>\n\
         \x20   <Hidden>false</Hidden>\n\
         \x20   <RunOnlyIfIdle>false</RunOnlyIfIdle>\n\
         \x20   <WakeToRun>false</WakeToRun>\n\
         \x20   <ExecutionTimeLimit>PT0S</ExecutionTimeLimit>\n\
         \x20   <Priority>7</Priority>\n\
         \x20   <RestartOnFailure>\n\
         \x20     <Interval>PT1M</Interval>\n\
         \x20     <Count>3</Count>\n\
         \x20   </RestartOnFailure>\n\
         \x20 </Settings>\n\
         \x20 <Actions Context=\"Author\">\n\
         \x20   <Exec>\n\
         \x20     <Command>{exe}</Command>\n\
         \x20     <Arguments>--config {config} start</Arguments>\n\
         \x20   </Exec>\n\
         \x20 </Actions>\n\
         </Task>\n"
    ))
}

/// A path for the task. Task Scheduler expands `%NAME%` in a command and
/// its arguments and has no escape for `%`, so a `%` is refused.
fn task_text<'p>(path: &'p Path, what: &'static str) -> Result<&'p str, Unrepresentable> {
    let text = plain_text(path, what, TASK)?;
    if text.contains('%') {
        return Err(refused(
            path,
            what,
            TASK,
            "Task Scheduler would expand `%NAME%` in it",
        ));
    }
    Ok(text)
}

/// One argument in double quotes as Windows programs split their command
/// line: backslashes are literal except before a `"`, where each one is
/// doubled and the quote escaped, and before the closing quote, where each
/// one is doubled.
pub fn windows_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for c in text.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.extend(std::iter::repeat_n('\\', 2 * backslashes + 1));
                out.push('"');
                backslashes = 0;
            }
            c => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.extend(std::iter::repeat_n('\\', 2 * backslashes));
    out.push('"');
    out
}

/// UTF-16LE with a byte-order mark.
fn utf16le_with_bom(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(2 + 2 * text.len());
    bytes.extend_from_slice(&[0xFF, 0xFE]);
    for unit in text.encode_utf16() {
        bytes.extend_from_slice(&unit.to_le_bytes());
    }
    bytes
}

// --- shared --------------------------------------------------------------------

/// Element text: `&`, `<` and `>` escaped. Characters XML 1.0 cannot carry
/// at all (U+FFFE, U+FFFF; controls are refused earlier) are refused.
fn xml_text(
    text: &str,
    path: &Path,
    what: &'static str,
    format: &'static str,
) -> Result<String, Unrepresentable> {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\u{FFFE}' | '\u{FFFF}' => {
                return Err(refused(
                    path,
                    what,
                    format,
                    "it holds a character XML cannot carry",
                ));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The path as UTF-8 without control characters, which none of the three
/// formats can hold unambiguously (a line break would start a new
/// directive in a unit file).
fn plain_text<'p>(
    path: &'p Path,
    what: &'static str,
    format: &'static str,
) -> Result<&'p str, Unrepresentable> {
    let text = path
        .to_str()
        .ok_or_else(|| refused(path, what, format, "it is not valid UTF-8"))?;
    if text.is_empty() {
        return Err(refused(path, what, format, "it is empty"));
    }
    if text.chars().any(char::is_control) {
        return Err(refused(
            path,
            what,
            format,
            "it holds a control character such as a line break",
        ));
    }
    Ok(text)
}

/// [`plain_text`] of a path that must be absolute in POSIX terms: a unit
/// or an agent run with no useful working directory.
fn absolute_text<'p>(
    path: &'p Path,
    what: &'static str,
    format: &'static str,
) -> Result<&'p str, Unrepresentable> {
    let text = plain_text(path, what, format)?;
    if !text.starts_with('/') {
        return Err(refused(path, what, format, "it is not an absolute path"));
    }
    Ok(text)
}

fn refused(
    path: &Path,
    what: &'static str,
    format: &'static str,
    reason: &'static str,
) -> Unrepresentable {
    Unrepresentable {
        what,
        path: path.to_path_buf(),
        format,
        reason,
    }
}
