//! What the per-OS autostart entry is (CLI.md §9.2–§9.5): where its file
//! lives, the commands that enable and disable it, and the notes printed
//! with it. `status` reports it; `install` writes the file.
//!
//! * [`render`] — the file's content, a pure function of explicit paths.
//! * [`manager`] — what the systemd user manager knows of the unit (read
//!   only).
//!
//! Nothing here ever runs the commands that enable or disable the entry:
//! CLI.md §9.1 leaves that to the user.

pub mod manager;
pub mod render;

use std::path::PathBuf;

use super::{OsPaths, Platform};

/// The autostart entry of one platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autostart {
    /// The platform name printed in `Autostart entry (<platform>)`.
    pub platform: &'static str,
    /// The autostart file.
    pub target: PathBuf,
    /// The command that activates it.
    pub enable: String,
    /// The command that deactivates it.
    pub disable: String,
    /// One line each.
    pub notes: Vec<String>,
}

impl Autostart {
    /// The entry for `platform`.
    pub fn of(platform: Platform, paths: &OsPaths) -> Autostart {
        let target = paths.autostart_file.clone();
        let shown = target.display().to_string();
        match platform {
            Platform::Linux | Platform::Wsl2 => {
                let linger = if platform == Platform::Wsl2 {
                    "run `loginctl enable-linger $USER` to keep the shim running when no shell is open"
                } else {
                    "run `loginctl enable-linger $USER` to start the shim without a login on a headless machine"
                };
                Autostart {
                    platform: platform.as_str(),
                    target,
                    enable: "systemctl --user enable --now autogpt-shim.service".into(),
                    disable: "systemctl --user disable --now autogpt-shim.service".into(),
                    notes: vec![
                        "run `systemctl --user daemon-reload && systemctl --user enable --now autogpt-shim.service` after installing".into(),
                        linger.into(),
                    ],
                }
            }
            Platform::Darwin => Autostart {
                platform: platform.as_str(),
                enable: format!("launchctl load {shown}"),
                disable: format!("launchctl unload {shown}"),
                target,
                notes: vec![
                    "RunAtLoad and KeepAlive start the shim at login and restart it after a failure"
                        .into(),
                ],
            },
            Platform::Windows => Autostart {
                platform: platform.as_str(),
                enable: format!("schtasks /Create /TN \"\\AutoGPT\\Shim\" /XML \"{shown}\""),
                disable: "schtasks /Delete /TN \"\\AutoGPT\\Shim\" /F".into(),
                target,
                notes: vec![
                    "the XML is only written, not registered; run the create command from an elevated prompt".into(),
                ],
            },
        }
    }

    /// Whether the autostart file exists (CLI.md §9.5).
    pub fn is_installed(&self) -> bool {
        self.target.is_file()
    }
}
