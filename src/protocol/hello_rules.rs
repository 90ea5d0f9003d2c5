//! The platform's rules for the `HELLO` fields that come from the user's
//! machine and configuration (`machine_id`, `display_name`,
//! `allowed_root`), written once.
//!
//! The platform closes with 4400 on a HELLO that breaks one of them, so a
//! value that breaks a rule can never connect: `start` checks the values it
//! would send against these rules before any connection and refuses to run
//! (a configuration error), and the machine-id generator only produces
//! values these rules accept. This module only judges strings; it never
//! reads configuration, never shortens or repairs a value, and never
//! echoes one (a message names the field and its rule).

use crate::text::is_non_printing;

/// A `HELLO` field the platform validates and the user's setup decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloField {
    /// `machine_id`: 1–128 characters, `^[A-Za-z0-9][A-Za-z0-9._:-]*$`.
    MachineId,
    /// `display_name`: 1–128 characters, no `<`, `>` or control character.
    DisplayName,
    /// `allowed_root` as sent on a data connection: 1–4096 characters, no
    /// `<`, `>` or control character.
    AllowedRoot,
}

/// Longest `machine_id`, in characters.
pub const MAX_MACHINE_ID_CHARS: usize = 128;
/// Longest `display_name`, in characters.
pub const MAX_DISPLAY_NAME_CHARS: usize = 128;
/// Longest `allowed_root`, in characters.
pub const MAX_ALLOWED_ROOT_CHARS: usize = 4096;

impl HelloField {
    /// The field's name, as in `HELLO` and in the configuration.
    pub fn key(self) -> &'static str {
        match self {
            HelloField::MachineId => "machine_id",
            HelloField::DisplayName => "display_name",
            HelloField::AllowedRoot => "allowed_root",
        }
    }

    /// The rule, phrased to follow the field's name.
    pub fn rule(self) -> &'static str {
        match self {
            HelloField::MachineId => {
                "must be 1 to 128 characters from A-Z a-z 0-9 . _ : - and start with a letter or digit"
            }
            HelloField::DisplayName => {
                "must be 1 to 128 characters without <, > or control characters (invisible formatting ones included)"
            }
            HelloField::AllowedRoot => {
                "must be 1 to 4096 characters without <, > or control characters (invisible formatting ones included)"
            }
        }
    }

    /// Whether the platform accepts `value` in this field. Lengths count
    /// characters (Unicode scalar values), as the platform does.
    pub fn accepts(self, value: &str) -> bool {
        match self {
            HelloField::MachineId => {
                let mut chars = value.chars();
                chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
                    && chars.all(is_machine_id_char)
                    && value.len() <= MAX_MACHINE_ID_CHARS
            }
            HelloField::DisplayName => plain_text_within(value, MAX_DISPLAY_NAME_CHARS),
            HelloField::AllowedRoot => plain_text_within(value, MAX_ALLOWED_ROOT_CHARS),
        }
    }
}

/// A character `machine_id` may hold after its first.
pub fn is_machine_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// 1 to `max` characters, none of them `<`, `>` or a control character.
/// Controls are taken broadly, as everywhere the shim shows untrusted text
/// ([`is_non_printing`]: format characters such as bidi overrides and
/// zero-width ones too): a value refused here is named at start, while
/// one the platform refuses only ends in its close code.
fn plain_text_within(value: &str, max: usize) -> bool {
    let mut count = 0;
    for c in value.chars() {
        count += 1;
        if count > max || c == '<' || c == '>' || is_non_printing(c) {
            return false;
        }
    }
    count > 0
}

/// The first field of a `HELLO` with these values that the platform
/// would refuse, in `HELLO`'s order; `allowed_root` is `None` on the
/// control connection, which sends `null`.
pub fn first_refused(
    machine_id: &str,
    display_name: &str,
    allowed_root: Option<&str>,
) -> Option<HelloField> {
    if !HelloField::MachineId.accepts(machine_id) {
        return Some(HelloField::MachineId);
    }
    if !HelloField::DisplayName.accepts(display_name) {
        return Some(HelloField::DisplayName);
    }
    match allowed_root {
        Some(root) if !HelloField::AllowedRoot.accepts(root) => Some(HelloField::AllowedRoot),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_id_follows_the_platform_pattern_and_length() {
        let field = HelloField::MachineId;
        for ok in [
            "a",
            "0f3c2d1e-aaaa-bbbb-cccc-0123456789ab",
            "host.example:1_x-y",
            &"a".repeat(128),
        ] {
            assert!(field.accepts(ok), "{ok}");
        }
        for refused in [
            "",
            "-leading-dash",
            ".hidden",
            "with space",
            "slash/inside",
            "ünïcode",
            "tab\tinside",
            &"a".repeat(129),
        ] {
            assert!(!field.accepts(refused), "{refused}");
        }
    }

    #[test]
    fn display_name_and_root_refuse_angle_brackets_and_controls() {
        for field in [HelloField::DisplayName, HelloField::AllowedRoot] {
            assert!(field.accepts("Büro-Rechner (2)"));
            assert!(field.accepts("/home/ana/my folder/ü"));
            for refused in [
                "",
                "a<b",
                "a>b",
                "line\nbreak",
                "nul\0",
                "del\u{7f}",
                "c1\u{85}",
                "bidi\u{202e}txt.exe",
                "zero\u{200b}width",
            ] {
                assert!(!field.accepts(refused), "{field:?} {refused:?}");
            }
        }
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        assert!(HelloField::DisplayName.accepts(&"é".repeat(128)));
        assert!(!HelloField::DisplayName.accepts(&"é".repeat(129)));
        assert!(HelloField::AllowedRoot.accepts(&format!("/{}", "é".repeat(4095))));
        assert!(!HelloField::AllowedRoot.accepts(&format!("/{}", "é".repeat(4096))));
    }

    #[test]
    fn the_first_refused_field_is_reported_and_a_null_root_passes() {
        assert_eq!(first_refused("m-1", "Laptop", Some("/home/a")), None);
        assert_eq!(first_refused("m-1", "Laptop", None), None);
        assert_eq!(
            first_refused("-m", "<b>", Some("/a<b")),
            Some(HelloField::MachineId)
        );
        assert_eq!(
            first_refused("m", "<b>", Some("/a<b")),
            Some(HelloField::DisplayName)
        );
        assert_eq!(
            first_refused("m", "b", Some("/a<b")),
            Some(HelloField::AllowedRoot)
        );
    }
}
