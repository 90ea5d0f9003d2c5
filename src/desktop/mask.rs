//! Sensitive windows kept out of screenshots and out of the agent's reach:
//! the `screenshot_mask` rules, which windows they match, and the parts of
//! the screen they black out.
//!
//! This goes beyond CAPABILITIES.md §4, whose reference captures the whole
//! screen. The built-in rules (password managers and passphrase prompts)
//! always apply; the user's entries add to them and can never remove one,
//! so no setting makes a screenshot show a password manager.
//!
//! Pure: the X11 backend supplies the windows, this module only decides.

use crate::files::Pattern;

use super::geometry::{Rect, visible_parts};

/// `WM_CLASS` parts (instance or class, compared case-insensitively) of
/// windows that are always masked: password managers, and the prompts of
/// polkit, ssh, GnuPG and the GNOME keyring.
const BUILT_IN_CLASSES: &[&str] = &[
    "keepassxc",
    "org.keepassxc.keepassxc",
    "keepass2",
    "keepass",
    "bitwarden",
    "1password",
    "enpass",
    "protonpass",
    "proton pass",
    "gcr-prompter",
    "pinentry",
    "pinentry-gtk-2",
    "pinentry-gnome3",
    "pinentry-qt",
    "ssh-askpass",
    "x11-ssh-askpass",
    "ksshaskpass",
    "polkit-gnome-authentication-agent-1",
    "polkit-kde-authentication-agent-1",
    "polkit-mate-authentication-agent-1",
    "lxpolkit",
    "lxqt-policykit-agent",
];

/// Title patterns always masked (case-insensitive globs).
const BUILT_IN_TITLES: &[&str] = &[
    "*keepassxc*",
    "*bitwarden*",
    "*1password*",
    "*authentication required*",
    "*enter passphrase*",
    "*unlock keyring*",
    "*openssh authentication*",
];

/// Longest entry of the setting, in characters: a window title pattern is a
/// few dozen.
const MAX_ENTRY_CHARS: usize = 1024;

/// One entry of `screenshot_mask`.
#[derive(Debug, Clone)]
enum Rule {
    /// `class:NAME`: a `WM_CLASS` instance or class, lower-cased.
    Class(String),
    /// `title:GLOB`: a window title pattern, lower-cased.
    Title(Pattern),
    /// `rect:x1,y1,x2,y2`: a fixed part of the root window.
    Fixed(Rect),
}

/// The mask rules in force: the built-in ones and the user's.
#[derive(Debug, Clone)]
pub struct MaskRules {
    rules: Vec<Rule>,
    /// How each user entry was spelled, for `doctor`.
    entries: Vec<String>,
}

/// What a window looks like to the rules.
#[derive(Debug, Clone, Default)]
pub struct WindowFacts {
    /// `WM_CLASS` instance and class.
    pub class: Vec<String>,
    /// `_NET_WM_NAME` or `WM_NAME`.
    pub title: Option<String>,
}

impl MaskRules {
    /// The built-in rules plus `entries` (the `screenshot_mask` setting).
    /// `Err` says which entry is malformed and why.
    pub fn new(entries: &[String]) -> Result<MaskRules, String> {
        let mut rules: Vec<Rule> = BUILT_IN_CLASSES
            .iter()
            .map(|c| Rule::Class((*c).to_owned()))
            .chain(BUILT_IN_TITLES.iter().map(|t| Rule::Title(Pattern::new(t))))
            .collect();
        for entry in entries {
            rules.push(parse_entry(entry)?);
        }
        Ok(MaskRules {
            rules,
            entries: entries.to_vec(),
        })
    }

    /// The user's entries, as configured.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The built-in class names and title patterns, for `doctor`.
    pub fn built_in() -> (&'static [&'static str], &'static [&'static str]) {
        (BUILT_IN_CLASSES, BUILT_IN_TITLES)
    }

    /// Whether a window with these facts is masked.
    pub fn matches(&self, window: &WindowFacts) -> bool {
        let classes: Vec<String> = window.class.iter().map(|c| c.to_lowercase()).collect();
        let title = window.title.as_deref().map(str::to_lowercase);
        self.rules.iter().any(|rule| match rule {
            Rule::Class(name) => classes.iter().any(|c| c == name),
            Rule::Title(pattern) => title.as_deref().is_some_and(|t| pattern.matches(t)),
            Rule::Fixed(_) => false,
        })
    }

    /// The fixed rectangles.
    pub fn fixed(&self) -> impl Iterator<Item = Rect> + '_ {
        self.rules.iter().filter_map(|rule| match rule {
            Rule::Fixed(rect) => Some(*rect),
            _ => None,
        })
    }
}

/// Parses one `screenshot_mask` entry.
fn parse_entry(entry: &str) -> Result<Rule, String> {
    if entry.chars().nth(MAX_ENTRY_CHARS).is_some() {
        return Err(format!(
            "an entry is longer than {MAX_ENTRY_CHARS} characters"
        ));
    }
    let (kind, value) = entry
        .split_once(':')
        .ok_or_else(|| format!("{entry:?} must start with class:, title: or rect:"))?;
    let value = value.trim();
    if value.is_empty() {
        return Err(format!("{entry:?} has nothing after the colon"));
    }
    match kind.trim() {
        "class" => Ok(Rule::Class(value.to_lowercase())),
        "title" => Ok(Rule::Title(Pattern::new(&value.to_lowercase()))),
        "rect" => {
            let numbers: Result<Vec<i64>, _> =
                value.split(',').map(|n| n.trim().parse::<i64>()).collect();
            let corners: [i64; 4] = numbers
                .ok()
                .and_then(|n| n.try_into().ok())
                .ok_or_else(|| format!("{entry:?}: rect: takes four integers x1,y1,x2,y2"))?;
            Rect::from_corners(corners)
                .map(Rule::Fixed)
                .ok_or_else(|| format!("{entry:?}: x2 must exceed x1 and y2 must exceed y1"))
        }
        _ => Err(format!("{entry:?} must start with class:, title: or rect:")),
    }
}

/// A top-level window as the screen shows it, bottom of the stack first.
#[derive(Debug, Clone)]
pub struct Stacked {
    /// Its frame's rectangle in root coordinates.
    pub frame: Rect,
    /// Whether it is masked.
    pub masked: bool,
}

/// The parts of the screen to black out: the visible parts of every masked
/// window (what the windows stacked above it do not cover) and the fixed
/// rectangles. `windows` is bottom-to-top.
pub fn masked_areas(rules: &MaskRules, windows: &[Stacked]) -> Vec<Rect> {
    let mut areas = Vec::new();
    for (i, window) in windows.iter().enumerate() {
        if !window.masked {
            continue;
        }
        let above: Vec<Rect> = windows[i + 1..]
            .iter()
            .filter(|w| !w.masked)
            .map(|w| w.frame)
            .collect();
        areas.extend(visible_parts(window.frame, &above));
    }
    areas.extend(rules.fixed());
    areas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(class: &[&str], title: Option<&str>) -> WindowFacts {
        WindowFacts {
            class: class.iter().map(|c| (*c).to_owned()).collect(),
            title: title.map(str::to_owned),
        }
    }

    #[test]
    fn password_managers_are_masked_without_any_setting() {
        let rules = MaskRules::new(&[]).unwrap();
        assert!(rules.matches(&facts(&["keepassxc", "KeePassXC"], None)));
        assert!(rules.matches(&facts(&["x"], Some("Vault - Bitwarden"))));
        assert!(!rules.matches(&facts(&["xterm", "XTerm"], Some("bash"))));
    }

    #[test]
    fn user_entries_add_classes_titles_and_rectangles() {
        let rules = MaskRules::new(&[
            "class:Slack".into(),
            "title:*Online Banking*".into(),
            "rect: 0, 0, 100, 50".into(),
        ])
        .unwrap();
        assert!(rules.matches(&facts(&["slack"], None)));
        assert!(rules.matches(&facts(&["firefox"], Some("My ONLINE banking — Firefox"))));
        assert!(rules.matches(&facts(&["keepassxc"], None)));
        assert_eq!(
            rules.fixed().collect::<Vec<_>>(),
            vec![Rect::new(0, 0, 100, 50)]
        );
    }

    #[test]
    fn malformed_entries_are_refused_with_the_reason() {
        for bad in [
            "Slack",
            "class:",
            "rect:1,2,3",
            "rect:5,5,1,1",
            "window:x",
            "rect:a,b,c,d",
        ] {
            assert!(MaskRules::new(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_visible_part_of_a_masked_window_is_blacked_out() {
        let rules = MaskRules::new(&[]).unwrap();
        let windows = [
            Stacked {
                frame: Rect::new(0, 0, 100, 100),
                masked: true,
            },
            Stacked {
                frame: Rect::new(50, 0, 100, 100),
                masked: false,
            },
        ];
        assert_eq!(
            masked_areas(&rules, &windows),
            vec![Rect::new(0, 0, 50, 100)]
        );
    }

    #[test]
    fn a_masked_window_above_another_masked_one_leaves_both_black() {
        let rules = MaskRules::new(&[]).unwrap();
        let windows = [
            Stacked {
                frame: Rect::new(0, 0, 100, 100),
                masked: true,
            },
            Stacked {
                frame: Rect::new(50, 0, 100, 100),
                masked: true,
            },
        ];
        let areas = masked_areas(&rules, &windows);
        let covered = |p| areas.iter().any(|a: &Rect| a.contains(p));
        assert!(covered([10, 10]) && covered([60, 10]) && covered([140, 10]));
    }
}
