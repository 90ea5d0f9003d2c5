//! Asking the desktop to open the authorize URL (AUTH.md §4): the desktop's
//! opener (`xdg-open`, macOS `open`) started directly, without a shell,
//! with the URL as its single argument, and only where a desktop session
//! exists. Failing to open a browser is not an error: the URL is always
//! printed for the user to open by hand.
//!
//! The URL carries the PKCE challenge and the state, which is why it goes
//! to the opener as an argument and nowhere else.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use crate::config::Environment;

/// Tries to open `url`; true when an opener was started.
pub fn open(url: &str, env: &Environment) -> bool {
    let Some(program) = opener(env) else {
        return false;
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
    command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .is_ok()
}

/// The opener of this desktop, if there is one.
fn opener(env: &Environment) -> Option<&'static str> {
    if cfg!(target_os = "macos") {
        return Some("open");
    }
    let set = |name: &str| env.get(name).is_some_and(|v: &OsStr| !v.is_empty());
    (set("DISPLAY") || set("WAYLAND_DISPLAY")).then_some("xdg-open")
}
