//! Asking the desktop to open the authorize URL (AUTH.md §4): the desktop's
//! opener (`xdg-open`, macOS `open`) started directly, without a shell,
//! with the URL as its single argument, and only where a desktop session
//! exists. Failing to open a browser is not an error: the URL is always
//! printed for the user to open by hand, and [`Launch`] says plainly why no
//! browser came up so the command can tell the user.
//!
//! The URL carries the PKCE challenge and the state, which is why it goes
//! to the opener as an argument and nowhere else.

use std::ffi::OsStr;
use std::process::{Child, Command, Stdio};

use crate::config::Environment;

/// What became of asking the desktop to open the URL.
#[derive(Debug)]
pub enum Launch {
    /// The opener started; it may still fail ([`Opener::failure`]).
    Started(Opener),
    /// There is no desktop session to open a browser in; says why.
    NoDesktop(&'static str),
    /// The opener could not be started; says which and why.
    Failed(String),
}

/// A running opener.
#[derive(Debug)]
pub struct Opener {
    program: &'static str,
    child: Child,
    reported: bool,
}

impl Opener {
    /// Why the opener failed, once: `Some` the first time it is seen to have
    /// exited unsuccessfully (e.g. `xdg-open` finding no browser), `None`
    /// while it runs, after it succeeded, and after the failure was told.
    pub fn failure(&mut self) -> Option<String> {
        if self.reported {
            return None;
        }
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(e) => {
                self.reported = true;
                return Some(format!("{}: {e}", self.program));
            }
        };
        self.reported = true;
        (!status.success()).then(|| format!("{} exited with {status}", self.program))
    }
}

/// Tries to open `url` in the desktop's browser.
pub fn launch(url: &str, env: &Environment) -> Launch {
    let program = match opener(env) {
        Ok(program) => program,
        Err(why) => return Launch::NoDesktop(why),
    };
    let mut command = Command::new(program);
    // The desktop's own variables stay (the opener needs them); none of the
    // shim's settings, the passphrase among them, reach the browser.
    for (name, _) in env.iter() {
        if name
            .to_str()
            .is_some_and(|n| n.to_ascii_uppercase().starts_with("AUTOGPT_SHIM_"))
        {
            command.env_remove(name);
        }
    }
    let spawned = command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(child) => Launch::Started(Opener {
            program,
            child,
            reported: false,
        }),
        Err(e) => Launch::Failed(format!("{program}: {e}")),
    }
}

/// The opener of this desktop, or why there is none.
fn opener(env: &Environment) -> Result<&'static str, &'static str> {
    if cfg!(target_os = "macos") {
        return Ok("open");
    }
    let set = |name: &str| env.get(name).is_some_and(|v: &OsStr| !v.is_empty());
    if set("DISPLAY") || set("WAYLAND_DISPLAY") {
        Ok("xdg-open")
    } else {
        Err("no graphical session (DISPLAY and WAYLAND_DISPLAY are not set)")
    }
}
