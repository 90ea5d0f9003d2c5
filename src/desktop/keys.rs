//! Key names of `INPUT_ACTION` (CAPABILITIES.md §4.6): a `key` chord such as
//! `ctrl+shift+t` and the `modifiers` of a click become X keysyms, and an
//! unknown name is refused before anything is pressed.
//!
//! Pure lookup: nothing here presses a key.

use crate::protocol::Modifier;

/// One key of a chord.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A named key, as its X keysym.
    Sym(u32),
    /// A single character, typed as the character (Shift added or a spare
    /// keycode bound as the keymap needs).
    Char(char),
}

pub const RETURN: u32 = 0xff0d;
pub const TAB: u32 = 0xff09;
const SHIFT_L: u32 = 0xffe1;
const CONTROL_L: u32 = 0xffe3;
const ALT_L: u32 = 0xffe9;
const SUPER_L: u32 = 0xffeb;
const F1: u32 = 0xffbe;

/// Named keys, lower-case, and their keysyms.
const NAMED: &[(&str, u32)] = &[
    ("enter", RETURN),
    ("return", RETURN),
    ("tab", TAB),
    ("esc", 0xff1b),
    ("escape", 0xff1b),
    ("space", 0x0020),
    ("backspace", 0xff08),
    ("delete", 0xffff),
    ("del", 0xffff),
    ("insert", 0xff63),
    ("home", 0xff50),
    ("end", 0xff57),
    ("pageup", 0xff55),
    ("pgup", 0xff55),
    ("pagedown", 0xff56),
    ("pgdn", 0xff56),
    ("up", 0xff52),
    ("down", 0xff54),
    ("left", 0xff51),
    ("right", 0xff53),
    ("shift", SHIFT_L),
    ("ctrl", CONTROL_L),
    ("control", CONTROL_L),
    ("alt", ALT_L),
    ("super", SUPER_L),
    ("meta", SUPER_L),
    ("win", SUPER_L),
    ("cmd", SUPER_L),
    ("command", SUPER_L),
    ("capslock", 0xffe5),
    ("printscreen", 0xff61),
];

/// The key a name stands for: a named key, `f1`…`f24`, or one character.
pub fn key_named(name: &str) -> Option<Key> {
    let lower = name.to_lowercase();
    if let Some((_, sym)) = NAMED.iter().find(|(n, _)| *n == lower) {
        return Some(Key::Sym(*sym));
    }
    if let Some(number) = lower.strip_prefix('f') {
        if let Ok(n @ 1..=24) = number.parse::<u32>() {
            if number.len() <= 2 && !number.starts_with('0') {
                return Some(Key::Sym(F1 + n - 1));
            }
        }
    }
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        // The character itself, not its lower-case form: "A" types "A".
        (Some(c), None) => Some(Key::Char(c)),
        _ => None,
    }
}

/// A `key` field as a chord: split on `+`, trimmed, lower-cased for the
/// lookup, empty parts dropped. `Err` names the first unknown part.
pub fn chord(spec: &str) -> Result<Vec<Key>, String> {
    spec.split('+')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| key_named(part).ok_or_else(|| part.to_lowercase()))
        .collect()
}

/// The keysym pressed for one of a click's `modifiers`.
pub fn modifier_key(modifier: Modifier) -> Key {
    Key::Sym(match modifier {
        Modifier::Shift => SHIFT_L,
        Modifier::Ctrl => CONTROL_L,
        Modifier::Alt => ALT_L,
        Modifier::Super => SUPER_L,
    })
}

/// How one character of `type` text is entered: line ends and tabs as
/// their keys, everything else as the character.
pub fn typed(c: char) -> Key {
    match c {
        '\n' | '\r' => Key::Sym(RETURN),
        '\t' => Key::Sym(TAB),
        other => Key::Char(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_keys_are_case_insensitive() {
        assert_eq!(key_named("Enter"), Some(Key::Sym(RETURN)));
        assert_eq!(key_named("PGDN"), Some(Key::Sym(0xff56)));
        assert_eq!(key_named("win"), Some(Key::Sym(SUPER_L)));
    }

    #[test]
    fn function_keys_run_from_f1_to_f24_only() {
        assert_eq!(key_named("f1"), Some(Key::Sym(0xffbe)));
        assert_eq!(key_named("F24"), Some(Key::Sym(0xffbe + 23)));
        assert_eq!(key_named("f25"), None);
        assert_eq!(key_named("f0"), None);
        assert_eq!(key_named("f01"), None);
    }

    #[test]
    fn a_single_character_is_its_own_key() {
        assert_eq!(key_named("a"), Some(Key::Char('a')));
        assert_eq!(key_named("A"), Some(Key::Char('A')));
        assert_eq!(key_named("é"), Some(Key::Char('é')));
        assert_eq!(key_named("ab"), None);
    }

    #[test]
    fn chords_split_trim_and_drop_empty_parts() {
        assert_eq!(
            chord(" ctrl + Shift +t "),
            Ok(vec![Key::Sym(CONTROL_L), Key::Sym(SHIFT_L), Key::Char('t')])
        );
        assert_eq!(
            chord("ctrl++a"),
            Ok(vec![Key::Sym(CONTROL_L), Key::Char('a')])
        );
    }

    #[test]
    fn an_unknown_part_names_itself_and_fails_the_whole_chord() {
        assert_eq!(chord("ctrl+Foo"), Err("foo".to_owned()));
        assert_eq!(chord("hyper"), Err("hyper".to_owned()));
    }

    #[test]
    fn line_ends_and_tabs_are_typed_as_keys() {
        assert_eq!(typed('\n'), Key::Sym(RETURN));
        assert_eq!(typed('\r'), Key::Sym(RETURN));
        assert_eq!(typed('\t'), Key::Sym(TAB));
        assert_eq!(typed('✓'), Key::Char('✓'));
    }
}
