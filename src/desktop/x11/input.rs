//! Input injection through XTEST (CAPABILITIES.md §4.6), by enigo on a
//! connection of its own: pointer moves, buttons and keys. Which keys and
//! buttons an action presses is decided by the caller; this module only
//! presses and releases.
//!
//! A character the keymap lacks is bound to a spare keycode for as long as
//! the injector lives; enigo unbinds them, and releases any key still held,
//! when the injector is dropped.

use enigo::{Button, Coordinate, Direction, Enigo, Keyboard, Mouse, Settings};

use crate::desktop::keys::Key;

/// A pointer button, wheel directions included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pointer {
    Left,
    Middle,
    Right,
    WheelUp,
    WheelDown,
    WheelLeft,
    WheelRight,
}

/// Press, release or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Press {
    Down,
    Up,
    Click,
}

/// The XTEST injector.
pub struct Injector {
    enigo: Enigo,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Injector")
    }
}

fn direction(press: Press) -> Direction {
    match press {
        Press::Down => Direction::Press,
        Press::Up => Direction::Release,
        Press::Click => Direction::Click,
    }
}

impl Injector {
    /// Connects to `display`.
    pub fn open(display: &str) -> Result<Injector, String> {
        let settings = Settings {
            x11_display: Some(display.to_owned()),
            release_keys_when_dropped: true,
            ..Settings::default()
        };
        let enigo = Enigo::new(&settings)
            .map_err(|e| format!("cannot open the input connection to {display}: {e}"))?;
        Ok(Injector { enigo })
    }

    /// Moves the pointer to root coordinates `point`.
    pub fn move_to(&mut self, [x, y]: [i64; 2]) -> Result<(), String> {
        let (Ok(x), Ok(y)) = (i32::try_from(x), i32::try_from(y)) else {
            return Err(format!("({x}, {y}) is outside the X coordinate range"));
        };
        self.enigo
            .move_mouse(x, y, Coordinate::Abs)
            .map_err(|e| e.to_string())
    }

    pub fn button(&mut self, button: Pointer, press: Press) -> Result<(), String> {
        let button = match button {
            Pointer::Left => Button::Left,
            Pointer::Middle => Button::Middle,
            Pointer::Right => Button::Right,
            Pointer::WheelUp => Button::ScrollUp,
            Pointer::WheelDown => Button::ScrollDown,
            Pointer::WheelLeft => Button::ScrollLeft,
            Pointer::WheelRight => Button::ScrollRight,
        };
        self.enigo
            .button(button, direction(press))
            .map_err(|e| e.to_string())
    }

    pub fn key(&mut self, key: Key, press: Press) -> Result<(), String> {
        let key = match key {
            Key::Sym(sym) => enigo::Key::Other(sym),
            Key::Char(c) => enigo::Key::Unicode(c),
        };
        self.enigo
            .key(key, direction(press))
            .map_err(|e| e.to_string())
    }
}
