//! `auth` (CLI.md §4.1, AUTH.md §3–§6, §13): the Authorization Code flow
//! with PKCE, from the callback listener to the stored tokens, with a
//! browser on this machine or, with `--no-browser`, on another one.
//!
//! Owns the order of the steps, what the user is told while waiting, and
//! the exit status of each failure. It prints the authorize URL (which
//! carries the challenge and the state, and nothing else secret) and never
//! prints the code, the verifier, the state on its own, a token, or what
//! the user pasted. The browser's page says "complete" only once the tokens
//! are stored.

use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use lexopt::Parser;
use zeroize::Zeroizing;

use super::args::{Arg, Halt, next_arg, unexpected, unhandled};
use super::catalog::CommandSpec;
use super::{PROGRAM, load_config};
use crate::auth::browser::{self, Launch, Opener};
use crate::auth::callback::{CALLBACK_TIMEOUT, Callback, Listener, Page, Settled};
use crate::auth::oauth::{self, OAuthError};
use crate::auth::paste::{self, Pasted};
use crate::auth::pkce::Pkce;
use crate::config::{Environment, Overrides};
use crate::exit;
use crate::log::Log;
use crate::secrets::{ErrorClass, SecretError};

/// The options of `auth` (CLI.md §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthOptions {
    /// `--no-browser`: open no browser here; the user opens the URL on
    /// another machine and pastes the final address (or the code) back.
    pub no_browser: bool,
}

/// Parses the options after `auth`; `spec` is its entry in the command
/// table.
pub(crate) fn parse(parser: &mut Parser, spec: &'static CommandSpec) -> Result<AuthOptions, Halt> {
    let mut options = AuthOptions::default();
    while let Some(arg) = next_arg(parser, spec)? {
        match arg {
            Arg::Option(option, None) if option.long == "--no-browser" => {
                options.no_browser = true;
            }
            Arg::Option(option, _) => return Err(unhandled(option)),
            Arg::Positional(arg) => return Err(unexpected(arg)),
        }
    }
    Ok(options)
}

/// Longest line read from standard input at the `--no-browser` prompt.
const MAX_PASTE: u64 = 16 * 1024;
/// How often a plain waiting line is printed when stderr is not a terminal.
const PLAIN_TICK: Duration = Duration::from_secs(30);

/// Runs `auth` and returns its exit status.
pub fn run(
    options: &AuthOptions,
    overrides: &Overrides,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let env = Environment::from_process();
    let log = Log::stderr(config.log_level);
    // The store first: a flow whose tokens could not be kept is wasted.
    let store = match super::select_store_asking(&config, &env, &log, stderr) {
        Ok(store) => store,
        Err(e) => return store_failure(&e, stderr),
    };
    if let Err(e) = store.tokens() {
        return store_failure(&e, stderr);
    }
    let connector = match super::connector(&config, &env, stderr) {
        Ok(connector) => connector,
        Err(code) => return code,
    };
    let listener = match Listener::bind(config.oauth_redirect_port) {
        Ok(listener) => listener,
        Err(e) => {
            say!(stderr, "Authentication failed: {e}");
            return exit::EX_TEMPFAIL;
        }
    };
    let pkce = match Pkce::generate() {
        Ok(pkce) => pkce,
        Err(e) => {
            say!(
                stderr,
                "Authentication failed: no randomness available: {}",
                e.0
            );
            return exit::EX_SOFTWARE;
        }
    };
    let redirect_uri = listener.redirect_uri();
    let url = oauth::authorize_url(
        config.endpoints.authorize(),
        &config.oauth_client_id,
        &redirect_uri,
        &pkce,
    );
    let terminal = rustix::termios::isatty(io::stderr());
    let outcome = if options.no_browser {
        from_another_machine(listener, &url, &pkce, terminal, stdout, stderr)
    } else {
        with_a_browser_here(listener, &url, &pkce, &env, terminal, stdout, stderr)
    };
    let Settled { callback, page } = match outcome {
        WaitEnd::Settled(settled) => settled,
        WaitEnd::InputEnded => {
            say!(
                stderr,
                "Authentication failed: standard input ended before an address or code was pasted"
            );
            return exit::EX_TEMPFAIL;
        }
    };
    let code = match callback {
        Callback::Code(code) => code,
        other => return callback_failure(other, stderr),
    };
    let issued = match oauth::exchange(
        &connector,
        config.endpoints.token(),
        &code,
        &redirect_uri,
        &config.oauth_client_id,
        &pkce,
    ) {
        Ok(issued) => issued,
        Err(e) => {
            say!(stderr, "Authentication failed: {e}");
            fail_page(page);
            return match e {
                OAuthError::Status(status) if (400..500).contains(&status) => exit::EX_NOPERM,
                OAuthError::Unusable(_) => exit::EX_PROTOCOL,
                OAuthError::Status(_) | OAuthError::Unreachable(_) => exit::EX_UNAVAILABLE,
            };
        }
    };
    let Some(refresh) = issued.refresh else {
        // `exchange` requires it; kept as a check rather than a panic.
        say!(
            stderr,
            "Authentication failed: the token response has no refresh token"
        );
        fail_page(page);
        return exit::EX_PROTOCOL;
    };
    if let Err(e) = store.store_tokens(&refresh, &issued.access) {
        fail_page(page);
        return store_failure(&e, stderr);
    }
    if let Some(page) = page {
        page.complete();
    }
    say!(
        stdout,
        "Authentication succeeded. Tokens are stored in {}.",
        store.location()
    );
    exit::SUCCESS
}

/// How waiting for the authorization ended.
enum WaitEnd {
    /// The callback (or a paste) settled the flow, or the deadline passed.
    Settled(Settled),
    /// `--no-browser`: standard input ended before anything usable came.
    InputEnded,
}

/// The browser on this machine: opens it (or says plainly why it cannot),
/// then serves the callback while showing the time left.
fn with_a_browser_here(
    listener: Listener,
    url: &str,
    pkce: &Pkce,
    env: &Environment,
    terminal: bool,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> WaitEnd {
    let redirect_uri = listener.redirect_uri();
    let port = listener.port();
    let mut opener: Option<Opener> = None;
    match browser::launch(url, env) {
        Launch::Started(started) => {
            opener = Some(started);
            say!(
                stdout,
                "Opening the browser to authorize this machine. If it does not open, visit this URL:"
            );
            say!(stdout, "{url}");
        }
        Launch::NoDesktop(why) => {
            say!(stdout, "No browser can be opened here: {why}.");
            say!(
                stdout,
                "Open this URL in a browser to authorize this machine:"
            );
            say!(stdout, "{url}");
            say!(stdout, "{}", elsewhere_hint(&redirect_uri, port));
        }
        Launch::Failed(why) => {
            say!(stdout, "Could not start a browser ({why}).");
            say!(
                stdout,
                "Open this URL in a browser to authorize this machine:"
            );
            say!(stdout, "{url}");
            say!(stdout, "{}", elsewhere_hint(&redirect_uri, port));
        }
    }
    let _ = stdout.flush();
    let mut waiting = Waiting::new(terminal);
    let settled = listener.serve(pkce, CALLBACK_TIMEOUT, &mut |left| {
        if let Some(why) = opener.as_mut().and_then(Opener::failure) {
            waiting.clear(stderr);
            say!(
                stderr,
                "The browser could not be opened ({why}). Open the URL above by hand. {}",
                elsewhere_hint(&redirect_uri, port)
            );
        }
        waiting.show(left, stderr);
        None
    });
    waiting.clear(stderr);
    WaitEnd::Settled(settled)
}

/// What to do when the browser runs on another computer.
fn elsewhere_hint(redirect_uri: &str, port: u16) -> String {
    format!(
        "At the end the browser is sent to {redirect_uri}, which only this machine answers: \
         on another computer, first forward that port with \
         `ssh -L {port}:127.0.0.1:{port} <this machine>`, \
         or run `{PROGRAM} auth --no-browser` here and paste the final address back."
    )
}

/// `--no-browser`: prints the URL for a browser on another computer, then
/// takes the final address (or the code) pasted on standard input, or the
/// callback should it arrive through a forwarded port, whichever comes
/// first.
fn from_another_machine(
    listener: Listener,
    url: &str,
    pkce: &Pkce,
    terminal: bool,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> WaitEnd {
    let redirect_uri = listener.redirect_uri();
    say!(
        stdout,
        "Open this URL in a browser on any computer and approve the request:"
    );
    say!(stdout, "{url}");
    say!(
        stdout,
        "The browser is then sent to {redirect_uri}?code=…, which does not load on another \
         computer. Copy the whole address from its address bar and paste it here \
         (or only the value of its code parameter)."
    );
    let _ = stdout.flush();
    let lines = read_lines();
    let mut ended = false;
    // The prompt shows the time left; when stderr is not a terminal, plain
    // lines keep showing it between prompts, as for a browser here.
    let mut waiting = Waiting::new(false).quiet_for(PLAIN_TICK);
    prompt(terminal, CALLBACK_TIMEOUT, stderr);
    let mut prompt_open = true;
    let settled = listener.serve(pkce, CALLBACK_TIMEOUT, &mut |left| {
        if !terminal {
            waiting.show(left, stderr);
        }
        match lines.try_recv() {
            Ok(Line::Text(text)) => {
                prompt_open = false;
                match paste::judge(&text, &redirect_uri, pkce) {
                    Pasted::Settled(callback) => return Some(callback),
                    Pasted::Unusable(why) => say!(stderr, "Not usable: {why}."),
                }
            }
            Ok(Line::TooLong) => {
                prompt_open = false;
                say!(
                    stderr,
                    "Not usable: that line is longer than {MAX_PASTE} bytes."
                );
            }
            Ok(Line::End) | Err(TryRecvError::Disconnected) => {
                ended = true;
                // Settles the wait; told apart by `ended` below.
                return Some(Callback::TimedOut);
            }
            Err(TryRecvError::Empty) => return None,
        }
        prompt(terminal, left, stderr);
        prompt_open = true;
        None
    });
    if terminal && prompt_open {
        // The prompt line is still open: end it before anything else.
        say!(stderr);
    }
    if ended && matches!(settled.callback, Callback::TimedOut) {
        return WaitEnd::InputEnded;
    }
    WaitEnd::Settled(settled)
}

/// Asks for the paste, with the time left: on a terminal the cursor stays
/// on the line for the answer.
fn prompt(terminal: bool, left: Duration, stderr: &mut dyn Write) {
    if terminal {
        let _ = write!(stderr, "Address or code ({} left): ", clock(left));
    } else {
        say!(
            stderr,
            "Paste the address or the code ({} left).",
            clock(left)
        );
    }
    let _ = stderr.flush();
}

/// One line of standard input, as the reading thread delivers it.
enum Line {
    Text(Zeroizing<String>),
    TooLong,
    End,
}

/// Reads standard input line by line on a thread of its own (a read
/// cannot be abandoned, and the callback must be served meanwhile). Lines
/// are bounded by [`MAX_PASTE`] and held zeroizing: one holds the code.
fn read_lines() -> Receiver<Line> {
    let (sender, receiver) = mpsc::channel();
    // Should no thread start, the sender goes with it and the receiver
    // reports it gone: the flow then ends as for an ended input.
    let _ = std::thread::Builder::new()
        .name("auth-stdin".to_owned())
        .spawn(move || {
            let stdin = io::stdin();
            let mut input = stdin.lock();
            loop {
                let mut buf = Zeroizing::new(Vec::new());
                let line = match input
                    .by_ref()
                    .take(MAX_PASTE + 1)
                    .read_until(b'\n', &mut buf)
                {
                    Ok(0) => Line::End,
                    Ok(_) if buf.last() != Some(&b'\n') && buf.len() as u64 > MAX_PASTE => {
                        // Skip the rest of the overlong line.
                        let mut rest = Vec::new();
                        let _ = input.read_until(b'\n', &mut rest);
                        Line::TooLong
                    }
                    Ok(_) => Line::Text(Zeroizing::new(String::from_utf8_lossy(&buf).into_owned())),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => Line::End,
                };
                let last = matches!(line, Line::End);
                if sender.send(line).is_err() || last {
                    return;
                }
            }
        });
    receiver
}

/// The line that shows the flow is waiting and how long is left: on a
/// terminal one line rewritten in place whenever the clock changes (once a
/// second); elsewhere a plain line at the
/// start and every [`PLAIN_TICK`].
struct Waiting {
    terminal: bool,
    shown: Option<String>,
    next_plain: Option<Instant>,
}

impl Waiting {
    fn new(terminal: bool) -> Waiting {
        Waiting {
            terminal,
            shown: None,
            next_plain: None,
        }
    }

    fn show(&mut self, left: Duration, stderr: &mut dyn Write) {
        let clock = clock(left);
        if self.terminal {
            if self.shown.as_deref() != Some(clock.as_str()) {
                let _ = write!(
                    stderr,
                    "\rWaiting for the authorization: {clock} left (Ctrl+C to cancel)\x1b[K"
                );
                let _ = stderr.flush();
                self.shown = Some(clock);
            }
            return;
        }
        let now = Instant::now();
        if self.next_plain.is_none_or(|next| now >= next) {
            say!(stderr, "Waiting for the authorization: {clock} left.");
            self.next_plain = Some(now + PLAIN_TICK);
        }
    }

    /// Shows nothing for `pause` (something else just showed the time).
    fn quiet_for(mut self, pause: Duration) -> Waiting {
        self.next_plain = Some(Instant::now() + pause);
        self
    }

    /// Erases the terminal line so that what follows starts clean.
    fn clear(&mut self, stderr: &mut dyn Write) {
        if self.terminal && self.shown.take().is_some() {
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }
}

/// `m:ss`, rounded up so the clock never shows 0:00 while time is left.
fn clock(left: Duration) -> String {
    let seconds = left.as_millis().div_ceil(1000);
    format!("{}:{:02}", seconds / 60, seconds % 60)
}

/// The exit status and message of a flow that ended without a code.
fn callback_failure(callback: Callback, stderr: &mut dyn Write) -> u8 {
    match callback {
        Callback::Code(_) => exit::EX_SOFTWARE,
        Callback::TimedOut => {
            say!(
                stderr,
                "Authentication failed: no authorization arrived within {} seconds",
                CALLBACK_TIMEOUT.as_secs()
            );
            exit::EX_TEMPFAIL
        }
        Callback::Denied(error) => {
            say!(
                stderr,
                "Authentication failed: authorization denied ({error})"
            );
            exit::EX_NOPERM
        }
        Callback::StateMismatch => {
            say!(stderr, "Authentication failed: state did not match");
            exit::EX_NOPERM
        }
        Callback::NoCode => {
            say!(
                stderr,
                "Authentication failed: no authorization code received"
            );
            exit::EX_NOPERM
        }
    }
}

/// Tells the browser, if it is waiting, that the authorization failed.
fn fail_page(page: Option<Page>) {
    if let Some(page) = page {
        page.failed();
    }
}

fn store_failure(error: &SecretError, stderr: &mut dyn Write) -> u8 {
    say!(stderr, "Authentication failed: {error}");
    match error.class() {
        ErrorClass::Internal => exit::EX_SOFTWARE,
        ErrorClass::Config | ErrorClass::Unavailable => exit::EX_CONFIG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_rounds_up_to_whole_seconds() {
        assert_eq!(clock(Duration::from_secs(300)), "5:00");
        assert_eq!(clock(Duration::from_millis(299_001)), "5:00");
        assert_eq!(clock(Duration::from_millis(298_999)), "4:59");
        assert_eq!(clock(Duration::from_millis(1)), "0:01");
        assert_eq!(clock(Duration::from_secs(61)), "1:01");
    }

    #[test]
    fn on_a_terminal_the_waiting_line_is_rewritten_in_place_once_a_second() {
        let mut out = Vec::new();
        let mut waiting = Waiting::new(true);
        waiting.show(Duration::from_secs(300), &mut out);
        waiting.show(Duration::from_millis(299_500), &mut out);
        waiting.show(Duration::from_millis(298_500), &mut out);
        waiting.clear(&mut out);
        let text = String::from_utf8(out).unwrap_or_default();
        assert_eq!(
            text,
            "\rWaiting for the authorization: 5:00 left (Ctrl+C to cancel)\x1b[K\
             \rWaiting for the authorization: 4:59 left (Ctrl+C to cancel)\x1b[K\
             \r\x1b[2K"
        );
        assert!(!text.contains('\n'));
    }

    #[test]
    fn elsewhere_the_waiting_lines_are_plain_and_periodic() {
        let mut out = Vec::new();
        let mut waiting = Waiting::new(false);
        waiting.show(Duration::from_secs(300), &mut out);
        waiting.show(Duration::from_secs(299), &mut out);
        waiting.clear(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "Waiting for the authorization: 5:00 left.\n"
        );
    }

    #[test]
    fn auth_takes_no_browser_and_nothing_else() {
        use crate::cli::{Command, Parsed, UsageError};
        let parse_args = |args: &[&str]| {
            let words = std::iter::once("auth").chain(args.iter().copied());
            match crate::cli::parse(words) {
                Ok(Parsed::Run(invocation)) => match invocation.command {
                    Command::Auth(options) => Ok(options),
                    other => panic!("{other:?}"),
                },
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        assert_eq!(parse_args(&[]), Ok(AuthOptions { no_browser: false }));
        assert_eq!(
            parse_args(&["--no-browser"]),
            Ok(AuthOptions { no_browser: true })
        );
        assert_eq!(
            parse_args(&["--no-browser=yes"]),
            Err(UsageError::UnexpectedValue("--no-browser".to_owned()))
        );
        assert_eq!(
            parse_args(&["--browser"]),
            Err(UsageError::UnknownOption("--browser".to_owned()))
        );
        assert_eq!(
            parse_args(&["now"]),
            Err(UsageError::UnexpectedArgument("now".to_owned()))
        );
    }
}
