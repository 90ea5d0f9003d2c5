//! Asking the person at the terminal for the passphrase of the encrypted
//! file store, when `auth` or `start` needs it and no file, credential or
//! variable gives one.
//!
//! Owns the terminal while it asks: echo, line editing and signal keys are
//! off, the answer is read byte by byte into one zeroizing buffer that never
//! grows (so no copy is left behind by a reallocation), and the terminal's
//! settings are put back on every way out. It never asks when standard input
//! is not a terminal, and never echoes, logs or returns what was typed
//! outside a [`Passphrase`].

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::termios::{self, LocalModes, OptionalActions, SpecialCodeIndex, Termios};
use zeroize::Zeroizing;

use crate::secrets::{Passphrase, PassphraseOrigin, SecretError};

/// The longest passphrase taken, as for a passphrase file.
const MAX_BYTES: usize = 64 * 1024;

/// Attempts before giving up on an empty or mistyped answer.
const TRIES: usize = 3;

/// The passphrase of `tokens.enc` at `file`, typed at the terminal; asked
/// twice when the file is `new`. `Ok(None)` when standard input is not a
/// terminal (nobody to ask).
pub(super) fn ask_passphrase(file: &Path, new: bool) -> Result<Option<Passphrase>, SecretError> {
    let stdin = std::io::stdin();
    let input = stdin.as_fd();
    if !termios::isatty(input) {
        return Ok(None);
    }
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "The OS keychain is unavailable, so the tokens are kept in the encrypted file {}.",
        crate::text::one_line(&file.display().to_string())
    );
    for _ in 0..TRIES {
        let first = read_hidden(
            input,
            if new {
                "Choose a passphrase for it: "
            } else {
                "Passphrase: "
            },
        )?;
        if first.is_empty() {
            let _ = writeln!(stderr, "The passphrase cannot be empty.");
            continue;
        }
        if new && read_hidden(input, "Type it again: ")? != first {
            let _ = writeln!(stderr, "The two passphrases differ.");
            continue;
        }
        return Ok(Passphrase::from_secret(first, PassphraseOrigin::Prompt));
    }
    Err(SecretError::PassphrasePrompt(format!(
        "no usable answer in {TRIES} tries"
    )))
}

/// Puts the terminal's saved settings back when dropped.
struct Restore<'fd> {
    fd: BorrowedFd<'fd>,
    saved: Termios,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(self.fd, OptionalActions::Now, &self.saved);
    }
}

/// Shows `prompt` on stderr and reads one line from the terminal `fd`
/// without echo. Ctrl+C cancels; Ctrl+D on an empty line ends the input.
fn read_hidden(fd: BorrowedFd<'_>, prompt: &str) -> Result<Zeroizing<Vec<u8>>, SecretError> {
    let failed = |e: rustix::io::Errno| SecretError::PassphrasePrompt(format!("terminal: {e}"));
    let mut stderr = std::io::stderr();
    let saved = termios::tcgetattr(fd).map_err(failed)?;
    let mut quiet = saved.clone();
    // Signal keys off too: `start` blocks SIGINT until it runs, so Ctrl+C
    // must reach this loop as a byte to cancel at all.
    quiet.local_modes &=
        !(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG | LocalModes::IEXTEN);
    quiet.special_codes[SpecialCodeIndex::VMIN] = 1;
    quiet.special_codes[SpecialCodeIndex::VTIME] = 0;
    // Flush: what was typed before the prompt is not the answer. The
    // prompt comes only once echo is off and the flush is done, so that
    // keys typed as soon as it shows are neither echoed nor thrown away.
    termios::tcsetattr(fd, OptionalActions::Flush, &quiet).map_err(failed)?;
    let restore = Restore { fd, saved };
    let _ = write!(stderr, "{prompt}");
    let _ = stderr.flush();

    let mut line = Zeroizing::new(Vec::with_capacity(MAX_BYTES));
    let outcome = loop {
        let mut byte = [0u8; 1];
        match rustix::io::read(fd, &mut byte) {
            Ok(0) => break Err("the input ended".to_owned()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => break Err(format!("terminal: {e}")),
        }
        match byte[0] {
            b'\r' | b'\n' => break Ok(()),
            0x03 => break Err("cancelled with Ctrl+C".to_owned()),
            0x04 if line.is_empty() => break Err("the input ended (Ctrl+D)".to_owned()),
            // Backspace or Delete: drop one whole UTF-8 character.
            0x08 | 0x7f => while line.pop().is_some_and(|b| b & 0xc0 == 0x80) {},
            // Ctrl+U: start over.
            0x15 => line.clear(),
            _ if line.len() == MAX_BYTES => {
                break Err(format!("longer than {MAX_BYTES} bytes"));
            }
            b => line.push(b),
        }
    };
    drop(restore);
    let _ = writeln!(stderr);
    outcome
        .map(|()| line)
        .map_err(SecretError::PassphrasePrompt)
}
