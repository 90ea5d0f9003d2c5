//! The passphrase of the encrypted file store typed at a terminal: `start`
//! and `auth` ask for it on a real pseudo-terminal when the keychain is
//! unavailable and no file, credential or variable gives it, without echo,
//! twice when `tokens.enc` is new, and give the terminal back as they found
//! it. The keychain is unavailable here because the children get no D-Bus
//! session bus.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod start_support;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use autogpt_shim::secrets::{Passphrase, TokenFile};
use autogpt_shim_emulator::OAuthEmulator;
use autogpt_shim_emulator::oauth::{form_fields, visit};
use rustix::process::Signal;
use rustix::termios::{self, LocalModes};
use start_support::*;

/// A pseudo-terminal: the test holds the controller side; the child gets
/// the other side as its standard input.
struct Terminal {
    controller: File,
    /// What the terminal would show: anything echoed by the line discipline.
    shown: Arc<Mutex<Vec<u8>>>,
    device: File,
}

impl Terminal {
    fn open() -> Terminal {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let controller: OwnedFd =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&controller).unwrap();
        unlockpt(&controller).unwrap();
        let name = ptsname(&controller, Vec::new()).unwrap();
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        let controller = File::from(controller);
        let shown = Arc::new(Mutex::new(Vec::new()));
        let mut reader = controller.try_clone().unwrap();
        let sink = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            controller,
            shown,
            device,
        }
    }

    /// Types `text` as a person would.
    fn type_text(&self, text: &str) {
        (&self.controller).write_all(text.as_bytes()).unwrap();
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().unwrap()).into_owned()
    }

    fn modes(&self) -> LocalModes {
        termios::tcgetattr(self.device.as_fd()).unwrap().local_modes
    }
}

/// Spawns `command` with the terminal as standard input and collects its
/// stdout and stderr.
fn spawn_on(terminal: &Terminal, mut command: Command) -> Shim {
    command
        .env_remove("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE")
        .stdin(Stdio::from(terminal.device.try_clone().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stdout = Captured::default();
    let stderr = Captured::default();
    stdout.clone().collect_from(child.stdout.take().unwrap());
    stderr.clone().collect_from(child.stderr.take().unwrap());
    Shim::from_parts(child, stdout, stderr)
}

/// Waits until stderr has shown `prompt` `times` times.
fn await_prompt(shim: &Shim, prompt: &str, times: usize) {
    let seen = eventually(WAIT, || shim.stderr.text().matches(prompt).count() >= times);
    assert!(
        seen,
        "no {prompt:?} (#{times}) on stderr\n{}",
        shim.output()
    );
}

fn start_command(home: &Home, emulator: &autogpt_shim_emulator::Emulator) -> Command {
    let mut args = platform_args(emulator);
    args.extend(["start", "--session-id", SESSION].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    home.command(&args)
}

#[test]
fn start_on_a_terminal_asks_for_the_passphrase_without_echo_and_connects() {
    let home = Home::new();
    let emulator = emulator();
    let terminal = Terminal::open();
    let before = terminal.modes();
    let mut shim = spawn_on(&terminal, start_command(&home, &emulator));
    await_prompt(&shim, "Passphrase: ", 1);
    terminal.type_text(&format!("{PASSPHRASE}\r"));
    assert!(
        emulator.accept(WAIT).is_some(),
        "the shim did not connect\n{}",
        shim.output()
    );
    // Nothing typed was shown, and the terminal has its modes back.
    assert!(
        !terminal.shown().contains(PASSPHRASE),
        "{}",
        terminal.shown()
    );
    assert_eq!(terminal.modes(), before);
    assert!(before.contains(LocalModes::ECHO | LocalModes::ICANON));
    let stderr = shim.stderr.text();
    assert!(!stderr.contains(PASSPHRASE), "{stderr}");
    // The keychain's absence is said plainly; its raw error text is not.
    assert!(stderr.contains("keychain is unavailable"), "{stderr}");
    assert!(!stderr.contains("secure storage"), "{stderr}");
    shim.signal(Signal::TERM);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
}

#[test]
fn a_wrong_passphrase_typed_for_start_is_refused_with_exit_78() {
    let home = Home::new();
    let emulator = emulator();
    let terminal = Terminal::open();
    let mut shim = spawn_on(&terminal, start_command(&home, &emulator));
    await_prompt(&shim, "Passphrase: ", 1);
    terminal.type_text("not-the-passphrase\r");
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    let stderr = shim.stderr.text();
    assert!(stderr.contains("typed at the prompt"), "{stderr}");
    assert!(!stderr.contains("not-the-passphrase"), "{stderr}");
}

#[test]
fn ctrl_c_or_an_empty_answer_three_times_ends_start_without_a_passphrase() {
    let home = Home::new();
    let emulator = emulator();
    let terminal = Terminal::open();
    let before = terminal.modes();
    let mut shim = spawn_on(&terminal, start_command(&home, &emulator));
    await_prompt(&shim, "Passphrase: ", 1);
    terminal.type_text("abc\u{3}");
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    assert!(shim.stderr.text().contains("cancelled with Ctrl+C"));
    assert_eq!(terminal.modes(), before);

    let mut shim = spawn_on(&terminal, start_command(&home, &emulator));
    for n in 1..=3 {
        await_prompt(&shim, "Passphrase: ", n);
        terminal.type_text("\r");
    }
    assert_eq!(shim.wait(WAIT), 78, "{}", shim.output());
    let stderr = shim.stderr.text();
    assert_eq!(stderr.matches("cannot be empty").count(), 3, "{stderr}");
    assert!(stderr.contains("no usable answer in 3 tries"), "{stderr}");
}

#[test]
fn without_a_terminal_start_does_not_ask_and_says_how_to_give_the_passphrase() {
    let home = Home::new();
    let emulator = emulator();
    let mut command = start_command(&home, &emulator);
    command.env_remove("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE");
    let out = command.stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Passphrase:"), "{stderr}");
    assert!(
        stderr.contains("AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE"),
        "{stderr}"
    );
    assert!(stderr.contains("on a terminal"), "{stderr}");
    assert!(!stderr.contains("secure storage"), "{stderr}");
}

#[test]
fn auth_asks_twice_for_a_new_passphrase_and_seals_the_tokens_with_it() {
    let home = Home::without_tokens();
    let oauth = OAuthEmulator::start().unwrap();
    let terminal = Terminal::open();
    let mut command = home.command(&["--platform-url", &oauth.base_url(), "auth"]);
    // Ports away from the other tests' blocks and the default range.
    let port = 47000 + (std::process::id() % 150) as u16 * 12;
    command.env("AUTOGPT_SHIM_OAUTH_REDIRECT_PORT", port.to_string());
    let mut shim = spawn_on(&terminal, command);

    await_prompt(&shim, "Choose a passphrase for it: ", 1);
    terminal.type_text("first choice\r");
    await_prompt(&shim, "Type it again: ", 1);
    terminal.type_text("second choice\r");
    await_prompt(&shim, "Choose a passphrase for it: ", 2);
    // Backspace drops a whole character, Ctrl+U the whole line.
    terminal.type_text("garbage\u{15}chosen pässwordx\u{7f}\r");
    await_prompt(&shim, "Type it again: ", 2);
    terminal.type_text("chosen pässword\r");
    assert!(shim.stderr.text().contains("The two passphrases differ."));

    let printed = eventually(WAIT, || shim.stdout.text().contains("/auth/authorize?"));
    assert!(printed, "no authorize URL\n{}", shim.output());
    let stdout = shim.stdout.text();
    let url = stdout
        .lines()
        .find(|l| l.contains("/auth/authorize?"))
        .unwrap()
        .trim();
    let query = url.split_once('?').unwrap().1;
    let field = |name: &str| {
        form_fields(query.as_bytes())
            .into_iter()
            .find(|(k, _)| k == name)
            .unwrap()
            .1
    };
    let callback = format!(
        "{}?code=the-code&state={}",
        field("redirect_uri"),
        field("state")
    );
    assert_eq!(visit(&callback, WAIT).unwrap().0, 200);
    assert_eq!(shim.wait(WAIT), 0, "{}", shim.output());
    assert!(!terminal.shown().contains("chosen"), "{}", terminal.shown());

    // The file opens with the chosen passphrase, and only with it.
    let chosen = Passphrase::new("chosen pässword".as_bytes().to_vec()).unwrap();
    let stored = TokenFile::new(home.secrets_dir(), chosen).read().unwrap();
    let (access, _) = oauth.issued()[0].clone();
    assert_eq!(stored.access_token.unwrap().expose(), access);
    let other = Passphrase::new(b"second choice".to_vec()).unwrap();
    assert!(TokenFile::new(home.secrets_dir(), other).read().is_err());
}
