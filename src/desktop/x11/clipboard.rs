//! The X11 `CLIPBOARD` selection (CAPABILITIES.md §4.10): a thread with its
//! own connection and window that owns the selection after a write and
//! answers other clients' requests for it (`TARGETS`, `UTF8_STRING`,
//! `STRING`, `TEXT`, INCR for large text), and that reads the selection
//! when another client owns it.
//!
//! Reads stop at [`MAX_READ_BYTES`] and after their deadline. Clipboard text
//! is never logged; what a read returns is decided by the caller's
//! writeback rules, not here.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeWindowAttributesAux, ConnectionExt as _, CreateWindowAux, EventMask, PropMode,
    Property, SelectionNotifyEvent, SelectionRequestEvent, Window, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use super::text;

/// The most clipboard text a read takes in; more is reported by size.
pub const MAX_READ_BYTES: usize = 8 * 1024 * 1024;

/// The KDE marker a password manager sets on a secret it copies.
pub const PASSWORD_HINT: &str = "x-kde-passwordManagerHint";

x11rb::atom_manager! {
    Atoms: AtomsCookie {
        CLIPBOARD,
        TARGETS,
        UTF8_STRING,
        TEXT,
        INCR,
        AUTOGPT_SHIM_SELECTION,
        AUTOGPT_SHIM_TIME,
        PASSWORD_HINT: b"x-kde-passwordManagerHint",
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The text (invalid UTF-8 replaced).
    Text(String),
    /// No owner, or no text target.
    Empty,
    /// The owner marked the content as a password manager's secret.
    Secret,
    /// Larger than [`MAX_READ_BYTES`]; at least this many bytes.
    TooLarge(u64),
}

enum Command {
    Own(Arc<String>, Sender<Result<u64, String>>),
    Read(Instant, Sender<Result<ReadOutcome, String>>),
}

/// Ownership state shared with the handlers, for the paste path's restore
/// rule (CAPABILITIES.md §4.6.1).
#[derive(Debug, Default)]
struct Status {
    /// Which write the selection holds now (0: none); bumped by every own.
    generation: u64,
    /// Whether the shim still owns the selection for `generation`.
    owned: bool,
    /// Text requests answered for `generation`.
    served: u64,
    /// The owner thread has ended.
    stopped: bool,
}

/// The clipboard owner thread's handle.
pub struct Clipboard {
    commands: Sender<Command>,
    wake: OwnedFd,
    status: Arc<(Mutex<Status>, Condvar)>,
}

impl std::fmt::Debug for Clipboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clipboard").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Clipboard {
    /// Connects to `display` and starts the owner thread.
    pub fn start(display: &str) -> Result<Clipboard, String> {
        let (conn, screen) = x11rb::connect(Some(display))
            .map_err(|e| format!("cannot connect to X display {display}: {e}"))?;
        let root = conn
            .setup()
            .roots
            .get(screen)
            .map(|s| s.root)
            .ok_or("the X server has no such screen")?;
        let atoms = Atoms::new(&conn).map_err(text)?.reply().map_err(text)?;
        let window = conn.generate_id().map_err(text)?;
        conn.create_window(
            0,
            window,
            root,
            -10,
            -10,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            0,
            &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )
        .map_err(text)?;
        conn.flush().map_err(text)?;
        let (wake_read, wake) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .map_err(text)?;
        let (commands, receiver) = bounded(16);
        let status = Arc::new((Mutex::new(Status::default()), Condvar::new()));
        let incr_threshold = (conn.maximum_request_bytes() / 2).clamp(4096, 256 * 1024);
        let mut owner = Owner {
            conn,
            window,
            atoms,
            text: None,
            transfers: VecDeque::new(),
            status: Arc::clone(&status),
            incr_threshold,
        };
        std::thread::Builder::new()
            .name("clipboard".into())
            .spawn(move || {
                owner.run(&receiver, &wake_read);
                let (state, changed) = &*owner.status;
                let mut state = lock(state);
                state.stopped = true;
                state.owned = false;
                changed.notify_all();
            })
            .map_err(text)?;
        Ok(Clipboard {
            commands,
            wake,
            status,
        })
    }

    /// Whether the owner thread still runs.
    pub fn is_alive(&self) -> bool {
        !lock(&self.status.0).stopped
    }

    fn send(&self, command: Command) -> Result<(), String> {
        self.commands
            .send_timeout(command, Duration::from_secs(2))
            .map_err(|_| "the clipboard owner is not answering".to_owned())?;
        let _ = rustix::io::write(&self.wake, &[1]);
        Ok(())
    }

    /// Makes `text` the clipboard's content; returns the write's
    /// generation.
    pub fn write(&self, text: String) -> Result<u64, String> {
        let (reply, answer) = bounded(1);
        self.send(Command::Own(Arc::new(text), reply))?;
        answer
            .recv_timeout(Duration::from_secs(3))
            .map_err(|_| "the clipboard owner did not answer".to_owned())?
    }

    /// The live clipboard content, waiting at most `timeout`.
    pub fn read(&self, timeout: Duration) -> Result<ReadOutcome, String> {
        let (reply, answer) = bounded(1);
        self.send(Command::Read(Instant::now() + timeout, reply))?;
        answer
            .recv_timeout(timeout + Duration::from_secs(1))
            .map_err(|_| "the clipboard owner did not answer in time".to_owned())?
    }

    /// Waits until another client has requested write `generation`'s text
    /// once, or `timeout`.
    pub fn wait_served(&self, generation: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let (state, changed) = &*self.status;
        let mut state = lock(state);
        while state.generation == generation && state.owned && state.served == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = changed
                .wait_timeout(state, left)
                .map(|(s, _)| s)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Whether the selection still holds write `generation` (no other
    /// client took it since).
    pub fn still_holds(&self, generation: u64) -> bool {
        let state = lock(&self.status.0);
        state.generation == generation && state.owned
    }
}

/// An INCR transfer in progress to one requestor.
struct Transfer {
    requestor: Window,
    property: u32,
    kind: u32,
    data: Arc<String>,
    latin1: Option<Vec<u8>>,
    offset: usize,
    started: Instant,
}

impl Transfer {
    fn bytes(&self) -> &[u8] {
        self.latin1.as_deref().unwrap_or(self.data.as_bytes())
    }
}

/// An INCR transfer whose requestor stopped reading is dropped after this.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

struct Owner {
    conn: RustConnection,
    window: Window,
    atoms: Atoms,
    text: Option<Arc<String>>,
    transfers: VecDeque<Transfer>,
    status: Arc<(Mutex<Status>, Condvar)>,
    incr_threshold: usize,
}

impl Owner {
    fn run(&mut self, commands: &Receiver<Command>, wake: &OwnedFd) {
        loop {
            loop {
                match self.conn.poll_for_event() {
                    Ok(Some(event)) => self.handle(event),
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(command) => {
                        if self.command(command).is_err() {
                            return;
                        }
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                }
            }
            if self.conn.flush().is_err() {
                return;
            }
            let now = Instant::now();
            self.transfers
                .retain(|t| now.duration_since(t.started) < TRANSFER_TIMEOUT);
            // Events read while a reply was awaited are queued already; the
            // next round picks them up before sleeping again.
            let stream = self.conn.stream().as_fd();
            let mut fds = [
                rustix::event::PollFd::new(&stream, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(wake, rustix::event::PollFlags::IN),
            ];
            let timeout = rustix::event::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            if rustix::event::poll(&mut fds, Some(&timeout)).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut drain = [0u8; 64];
            while matches!(rustix::io::read(wake, &mut drain), Ok(n) if n > 0) {}
        }
    }

    /// `Err` when the connection is gone.
    fn command(&mut self, command: Command) -> Result<(), ()> {
        match command {
            Command::Own(text, reply) => {
                let result = self.own(text);
                let gone = result.is_err() && !self.alive();
                let _ = reply.send(result);
                if gone { Err(()) } else { Ok(()) }
            }
            Command::Read(deadline, reply) => {
                let result = self.read(deadline);
                let gone = result.is_err() && !self.alive();
                let _ = reply.send(result);
                if gone { Err(()) } else { Ok(()) }
            }
        }
    }

    fn alive(&self) -> bool {
        self.conn
            .get_input_focus()
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some()
    }

    fn set_status(&self, update: impl FnOnce(&mut Status)) {
        let (state, changed) = &*self.status;
        update(&mut lock(state));
        changed.notify_all();
    }

    /// A server timestamp, from the notification of a zero-length append
    /// to a property of our window (ICCCM §2.1: never `CurrentTime`).
    fn server_time(&mut self, deadline: Instant) -> Result<u32, String> {
        self.conn
            .change_property8(
                PropMode::APPEND,
                self.window,
                self.atoms.AUTOGPT_SHIM_TIME,
                AtomEnum::STRING,
                &[],
            )
            .map_err(text)?;
        self.conn.flush().map_err(text)?;
        let atom = self.atoms.AUTOGPT_SHIM_TIME;
        let window = self.window;
        let event = self.wait_for(deadline, |event| match event {
            Event::PropertyNotify(e) if e.window == window && e.atom == atom => Some(e.time),
            _ => None,
        })?;
        event.ok_or_else(|| "the X server sent no timestamp".to_owned())
    }

    /// The window owning `CLIPBOARD` (0: none).
    fn owner(&self) -> Result<Window, String> {
        Ok(self
            .conn
            .get_selection_owner(self.atoms.CLIPBOARD)
            .map_err(text)?
            .reply()
            .map_err(text)?
            .owner)
    }

    fn own(&mut self, content: Arc<String>) -> Result<u64, String> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let time = self.server_time(deadline)?;
        self.conn
            .set_selection_owner(self.window, self.atoms.CLIPBOARD, time)
            .map_err(text)?;
        if self.owner()? != self.window {
            return Err("the X server did not make the shim the clipboard owner".into());
        }
        self.text = Some(content);
        let mut generation = 0;
        self.set_status(|s| {
            s.generation += 1;
            s.owned = true;
            s.served = 0;
            generation = s.generation;
        });
        Ok(generation)
    }

    /// Handles events until `pick` returns a value or `deadline` passes.
    fn wait_for<T>(
        &mut self,
        deadline: Instant,
        mut pick: impl FnMut(&Event) -> Option<T>,
    ) -> Result<Option<T>, String> {
        loop {
            while let Some(event) = self.conn.poll_for_event().map_err(text)? {
                if let Some(found) = pick(&event) {
                    return Ok(Some(found));
                }
                self.handle(event);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.conn.flush().map_err(text)?;
            let stream = self.conn.stream().as_fd();
            let mut fds = [rustix::event::PollFd::new(
                &stream,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::try_from(left.min(Duration::from_millis(100)).as_nanos())
                    .unwrap_or(100_000_000),
            };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
    }

    fn read(&mut self, deadline: Instant) -> Result<ReadOutcome, String> {
        let owner = self.owner()?;
        if owner == self.window {
            return Ok(match &self.text {
                Some(text) => ReadOutcome::Text(text.as_str().to_owned()),
                None => ReadOutcome::Empty,
            });
        }
        if owner == 0 {
            return Ok(ReadOutcome::Empty);
        }
        let targets: Vec<u32> = match self.convert(self.atoms.TARGETS, deadline)? {
            Converted::Data(_, bytes) => bytes
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            _ => Vec::new(),
        };
        if targets.contains(&self.atoms.PASSWORD_HINT) {
            match self.convert(self.atoms.PASSWORD_HINT, deadline)? {
                Converted::Data(_, value) if value.trim_ascii() == b"secret" => {
                    return Ok(ReadOutcome::Secret);
                }
                _ => {}
            }
        }
        let target = if targets.is_empty() || targets.contains(&self.atoms.UTF8_STRING) {
            self.atoms.UTF8_STRING
        } else if targets.contains(&u32::from(AtomEnum::STRING)) {
            AtomEnum::STRING.into()
        } else {
            return Ok(ReadOutcome::Empty);
        };
        Ok(match self.convert(target, deadline)? {
            Converted::Data(kind, bytes) => {
                if kind == u32::from(AtomEnum::STRING) {
                    ReadOutcome::Text(bytes.iter().map(|b| char::from(*b)).collect())
                } else {
                    ReadOutcome::Text(String::from_utf8_lossy(&bytes).into_owned())
                }
            }
            Converted::TooLarge(size) => ReadOutcome::TooLarge(size),
            Converted::Refused => ReadOutcome::Empty,
        })
    }

    /// Asks the owner for `target` and reads the answer (INCR included).
    fn convert(&mut self, target: u32, deadline: Instant) -> Result<Converted, String> {
        let property = self.atoms.AUTOGPT_SHIM_SELECTION;
        self.conn
            .delete_property(self.window, property)
            .map_err(text)?;
        self.conn
            .convert_selection(
                self.window,
                self.atoms.CLIPBOARD,
                target,
                property,
                x11rb::CURRENT_TIME,
            )
            .map_err(text)?;
        let window = self.window;
        let selection = self.atoms.CLIPBOARD;
        let notified = self.wait_for(deadline, |event| match event {
            Event::SelectionNotify(e) if e.requestor == window && e.selection == selection => {
                Some(e.property)
            }
            _ => None,
        })?;
        let Some(answered) = notified else {
            return Err("the clipboard owner did not answer within 2 s".into());
        };
        if answered == u32::from(AtomEnum::NONE) {
            return Ok(Converted::Refused);
        }
        let units = u32::try_from(MAX_READ_BYTES / 4).unwrap_or(u32::MAX);
        let reply = self
            .conn
            .get_property(true, window, property, AtomEnum::ANY, 0, units)
            .map_err(text)?
            .reply()
            .map_err(text)?;
        if reply.type_ == self.atoms.INCR {
            return self.read_incremental(deadline);
        }
        if reply.bytes_after > 0 {
            let size = reply.value.len() as u64 + u64::from(reply.bytes_after);
            self.conn.delete_property(window, property).map_err(text)?;
            return Ok(Converted::TooLarge(size));
        }
        Ok(Converted::Data(reply.type_, reply.value))
    }

    fn read_incremental(&mut self, deadline: Instant) -> Result<Converted, String> {
        let property = self.atoms.AUTOGPT_SHIM_SELECTION;
        let window = self.window;
        let mut data = Vec::new();
        let mut kind = u32::from(AtomEnum::NONE);
        loop {
            let new_value = self.wait_for(deadline, |event| match event {
                Event::PropertyNotify(e)
                    if e.window == window
                        && e.atom == property
                        && e.state == Property::NEW_VALUE =>
                {
                    Some(())
                }
                _ => None,
            })?;
            if new_value.is_none() {
                return Err("the clipboard owner stopped sending within 2 s".into());
            }
            let units = u32::try_from(MAX_READ_BYTES / 4).unwrap_or(u32::MAX);
            let reply = self
                .conn
                .get_property(true, window, property, AtomEnum::ANY, 0, units)
                .map_err(text)?
                .reply()
                .map_err(text)?;
            if reply.value.is_empty() {
                return Ok(Converted::Data(kind, data));
            }
            kind = reply.type_;
            data.extend_from_slice(&reply.value);
            if data.len() > MAX_READ_BYTES {
                return Ok(Converted::TooLarge(data.len() as u64));
            }
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::SelectionRequest(request) => self.answer(&request),
            Event::SelectionClear(e) if e.selection == self.atoms.CLIPBOARD => {
                self.text = None;
                self.set_status(|s| s.owned = false);
            }
            Event::PropertyNotify(e) if e.state == Property::DELETE => {
                self.continue_transfer(e.window, e.atom);
            }
            _ => {}
        }
    }

    fn answer(&mut self, request: &SelectionRequestEvent) {
        let property = if request.property == u32::from(AtomEnum::NONE) {
            request.target
        } else {
            request.property
        };
        let served = self.serve(request, property);
        let notify = SelectionNotifyEvent {
            response_type: x11rb::protocol::xproto::SELECTION_NOTIFY_EVENT,
            sequence: 0,
            time: request.time,
            requestor: request.requestor,
            selection: request.selection,
            target: request.target,
            property: if served.is_some() {
                property
            } else {
                AtomEnum::NONE.into()
            },
        };
        let _ = self
            .conn
            .send_event(false, request.requestor, EventMask::NO_EVENT, notify);
        let _ = self.conn.flush();
        if served == Some(true) {
            self.set_status(|s| s.served += 1);
        }
    }

    /// Writes the answer; `Some(true)` when text was handed out,
    /// `Some(false)` for `TARGETS`, `None` when refused.
    fn serve(&mut self, request: &SelectionRequestEvent, property: u32) -> Option<bool> {
        if request.selection != self.atoms.CLIPBOARD || request.owner != self.window {
            return None;
        }
        let data = self.text.clone()?;
        let string = u32::from(AtomEnum::STRING);
        if request.target == self.atoms.TARGETS {
            let targets = [
                self.atoms.TARGETS,
                self.atoms.UTF8_STRING,
                string,
                self.atoms.TEXT,
            ];
            self.conn
                .change_property32(
                    PropMode::REPLACE,
                    request.requestor,
                    property,
                    AtomEnum::ATOM,
                    &targets,
                )
                .ok()?;
            return Some(false);
        }
        let (kind, latin1) =
            if request.target == self.atoms.UTF8_STRING || request.target == self.atoms.TEXT {
                (self.atoms.UTF8_STRING, None)
            } else if request.target == string {
                let bytes = data
                    .chars()
                    .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                    .collect();
                (string, Some(bytes))
            } else {
                return None;
            };
        let transfer = Transfer {
            requestor: request.requestor,
            property,
            kind,
            data,
            latin1,
            offset: 0,
            started: Instant::now(),
        };
        if transfer.bytes().len() <= self.incr_threshold {
            self.conn
                .change_property8(
                    PropMode::REPLACE,
                    request.requestor,
                    property,
                    kind,
                    transfer.bytes(),
                )
                .ok()?;
            return Some(true);
        }
        // INCR: announce the size, then send a chunk each time the
        // requestor deletes the property.
        let size = u32::try_from(transfer.bytes().len()).unwrap_or(u32::MAX);
        self.conn
            .change_window_attributes(
                request.requestor,
                &ChangeWindowAttributesAux::new().event_mask(EventMask::PROPERTY_CHANGE),
            )
            .ok()?;
        self.conn
            .change_property32(
                PropMode::REPLACE,
                request.requestor,
                property,
                self.atoms.INCR,
                &[size],
            )
            .ok()?;
        self.transfers
            .retain(|t| !(t.requestor == request.requestor && t.property == property));
        self.transfers.push_back(transfer);
        Some(true)
    }

    fn continue_transfer(&mut self, window: Window, atom: u32) {
        let Some(index) = self
            .transfers
            .iter()
            .position(|t| t.requestor == window && t.property == atom)
        else {
            return;
        };
        let chunk = self.incr_threshold;
        let Some(transfer) = self.transfers.get_mut(index) else {
            return;
        };
        let bytes = transfer.bytes();
        let end = (transfer.offset + chunk).min(bytes.len());
        let piece = bytes.get(transfer.offset..end).unwrap_or(&[]).to_vec();
        let (requestor, property, kind) = (transfer.requestor, transfer.property, transfer.kind);
        transfer.offset = end;
        let finished = piece.is_empty();
        let _ = self
            .conn
            .change_property8(PropMode::REPLACE, requestor, property, kind, &piece);
        let _ = self.conn.flush();
        if finished {
            self.transfers.remove(index);
        }
    }
}

enum Converted {
    Data(u32, Vec<u8>),
    TooLarge(u64),
    Refused,
}
