//! A real X server for the computer-use tests: a private `Xvfb` (found
//! through `-displayfd`, so parallel tests never share a display),
//! optionally an EWMH window manager (`openbox`) and two RandR monitors;
//! test windows that record the input they receive (`client.py`); and the
//! outside views a test checks the shim against: the pointer, the active
//! window, the client list and the `CLIPBOARD` as `xdotool`, `xprop` and
//! `xclip` see them, and the screen's pixels through `GetImage`. Also a PNG
//! decoder for the screenshots the shim returns.
//!
//! Everything here runs on the test's own display: every program is started
//! with `DISPLAY` set to it and without any Wayland indication, in its own
//! process group, and is killed with the server when the [`XServer`] is
//! dropped. Nothing here talks to the shim; the tests do that themselves.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt as _, ImageFormat, ImageOrder};
use x11rb::rust_connection::RustConnection;

/// The test screen's size: one 24-bit screen of this many pixels.
pub const SCREEN: [u32; 2] = [1920, 1080];

/// How long any wait for the X side may take before the test fails.
pub const X_WAIT: Duration = Duration::from_secs(15);

/// How long a `CLIPBOARD` read may take: the selection owner may be gone or
/// stuck, and the test must say so rather than hang.
pub const CLIPBOARD_WAIT: Duration = Duration::from_secs(2);

/// The root window's colour: neither black (the masking colour) nor any
/// colour the tests give their windows.
pub const ROOT_COLOUR: [u8; 3] = [0x40, 0x50, 0x60];

/// Debian's own Python, which has `tkinter` from `python3-tk`.
pub const PYTHON: &str = "/usr/bin/python3";

/// The test window program.
pub const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/desktop_support/client.py"
);

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The window manager's configuration: one desktop, new windows focused, no
/// key or mouse bindings.
const OPENBOX_CONFIG: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <focus>
    <focusNew>yes</focusNew>
    <followMouse>no</followMouse>
  </focus>
  <desktops>
    <number>1</number>
  </desktops>
  <keyboard/>
  <mouse/>
</openbox_config>
"#;

/// The two RandR monitors of [`XServerOptions::two_monitors`]: the left and
/// the right half of the screen, each 960×1080, as `[x, y, width, height]`.
pub const LEFT_MONITOR: [i32; 4] = [0, 0, 960, 1080];
pub const RIGHT_MONITOR: [i32; 4] = [960, 0, 960, 1080];

/// Which half of a split screen is the RandR primary monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primary {
    Left,
    Right,
}

/// What an [`XServer`] starts besides `Xvfb`.
#[derive(Debug, Clone)]
pub struct XServerOptions {
    window_manager: bool,
    /// RandR monitors `[x, y, width, height]` and the primary's index;
    /// `None`: the server's own single monitor.
    monitors: Option<(Vec<[i32; 4]>, usize)>,
    randr: bool,
    xtest: bool,
}

impl Default for XServerOptions {
    fn default() -> Self {
        XServerOptions {
            window_manager: false,
            monitors: None,
            randr: true,
            xtest: true,
        }
    }
}

impl XServerOptions {
    /// A bare server: no window manager, one monitor, RandR and XTEST.
    pub fn new() -> XServerOptions {
        XServerOptions::default()
    }

    /// Also runs `openbox`, an EWMH window manager, and waits until it
    /// manages the root window.
    pub fn window_manager(mut self) -> XServerOptions {
        self.window_manager = true;
        self
    }

    /// Splits the screen into two RandR monitors, [`LEFT_MONITOR`] and
    /// [`RIGHT_MONITOR`], with `primary` the primary one.
    pub fn two_monitors(self, primary: Primary) -> XServerOptions {
        let index = match primary {
            Primary::Left => 0,
            Primary::Right => 1,
        };
        self.monitors(&[LEFT_MONITOR, RIGHT_MONITOR], index)
    }

    /// Replaces the server's monitor by these RandR monitors (`[x, y,
    /// width, height]`, named `M0`, `M1`, … in this order), `rects[primary]`
    /// the primary one. They need not cover the screen.
    pub fn monitors(mut self, rects: &[[i32; 4]], primary: usize) -> XServerOptions {
        assert!(primary < rects.len());
        self.monitors = Some((rects.to_vec(), primary));
        self
    }

    /// Starts the server without the RandR extension (`-extension RANDR`).
    pub fn without_randr(mut self) -> XServerOptions {
        self.randr = false;
        self
    }

    /// Starts the server without the XTEST extension (`-tst`); `xdotool`
    /// cannot move the pointer or type there.
    pub fn without_xtest(mut self) -> XServerOptions {
        self.xtest = false;
        self
    }
}

/// A private X server and the programs started on it.
pub struct XServer {
    display: u32,
    xvfb: Child,
    /// Programs started on the display (window manager, clipboard owners),
    /// each the leader of its own process group.
    helpers: Mutex<Vec<Child>>,
    window_manager: bool,
    dir: tempfile::TempDir,
    windows: AtomicUsize,
}

impl XServer {
    /// Starts `Xvfb -displayfd` with one 1920×1080×24 screen and RandR, the
    /// root painted [`ROOT_COLOUR`], then what `options` asks for.
    pub fn start(options: XServerOptions) -> XServer {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("xvfb.log")).unwrap();
        // `-displayfd 1`: Xvfb picks a free display number itself and writes
        // it to its standard output once it accepts connections.
        // `-noreset`: the server would otherwise reset (and forget the
        // monitors and the clipboard) whenever its last client disconnects.
        let mut command = Command::new("Xvfb");
        command
            .args(["-displayfd", "1", "-screen", "0", "1920x1080x24"])
            .args(["-nolisten", "tcp", "-noreset"])
            .args([
                if options.randr {
                    "+extension"
                } else {
                    "-extension"
                },
                "RANDR",
            ]);
        if !options.xtest {
            command.arg("-tst");
        }
        let mut xvfb = command
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("Xvfb is not installed (Debian package xvfb)");
        let mut stdout = xvfb.stdout.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while let Ok(1) = stdout.read(&mut byte) {
                if byte[0] == b'\n' {
                    let _ = sender.send(String::from_utf8_lossy(&line).into_owned());
                    line.clear();
                } else {
                    line.push(byte[0]);
                }
            }
        });
        let display = match receiver.recv_timeout(X_WAIT) {
            Ok(line) => line.trim().parse().unwrap(),
            Err(_) => {
                let _ = kill_group(xvfb.id());
                let _ = xvfb.wait();
                panic!(
                    "Xvfb did not report a display within {X_WAIT:?}: {}",
                    std::fs::read_to_string(dir.path().join("xvfb.log")).unwrap_or_default()
                );
            }
        };
        let server = XServer {
            display,
            xvfb,
            helpers: Mutex::new(Vec::new()),
            window_manager: options.window_manager,
            dir,
            windows: AtomicUsize::new(0),
        };
        server.run_ok("xsetroot", &["-solid", &hex(ROOT_COLOUR)]);
        if let Some((rects, primary)) = &options.monitors {
            server.set_monitors(rects, *primary);
        }
        if options.window_manager {
            server.start_window_manager();
        }
        server
    }

    /// `":N"`, what `DISPLAY` is set to for this server.
    pub fn display(&self) -> String {
        format!(":{}", self.display)
    }

    /// The display number.
    pub fn number(&self) -> u32 {
        self.display
    }

    /// Whether `openbox` runs on this server.
    pub fn has_window_manager(&self) -> bool {
        self.window_manager
    }

    /// A directory that lives as long as the server.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A command for `program` on this display: a clean environment with
    /// `DISPLAY` and a private home, no Wayland variables, its own process
    /// group.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        command
            .env_clear()
            .env("PATH", PATH)
            .env("DISPLAY", self.display())
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .stdin(Stdio::null())
            .process_group(0);
        command
    }

    /// Runs `program args` on this display to its end (at most `timeout`);
    /// `None` when it did not end in time (it is killed then).
    pub fn run_for(&self, program: &str, args: &[&str], timeout: Duration) -> Option<Output> {
        let mut command = self.command(program);
        command.args(args);
        run_with_timeout(command, None, timeout)
    }

    /// Runs `program args` and returns its standard output; panics when it
    /// fails or hangs.
    pub fn run_ok(&self, program: &str, args: &[&str]) -> String {
        let output = self
            .run_for(program, args, X_WAIT)
            .unwrap_or_else(|| panic!("{program} {args:?} did not end within {X_WAIT:?}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Starts `command` (from [`XServer::command`]) as a helper that is
    /// killed with the server.
    pub fn spawn_helper(&self, mut command: Command) -> u32 {
        let child = command.spawn().unwrap();
        let pid = child.id();
        self.helpers.lock().unwrap().push(child);
        pid
    }

    fn set_monitors(&self, rects: &[[i32; 4]], primary: usize) {
        // The first monitor takes over the output `screen`, which removes
        // the automatic monitor; the others have no output. A leading `*`
        // makes a monitor the primary.
        for (n, [x, y, width, height]) in rects.iter().enumerate() {
            let name = format!("{}M{n}", if n == primary { "*" } else { "" });
            // Physical size at 96 dpi, as the server assumes.
            let (mm_width, mm_height) = (width * 254 / 960, height * 254 / 960);
            let geometry = format!("{width}/{mm_width}x{height}/{mm_height}+{x}+{y}");
            let outputs = if n == 0 { "screen" } else { "none" };
            self.run_ok("xrandr", &["--setmonitor", &name, &geometry, outputs]);
        }
        let monitors = self.monitors();
        assert_eq!(monitors.len(), rects.len(), "{monitors:?}");
    }

    /// The active RandR monitors as `xrandr --listactivemonitors` shows
    /// them, in its order: `(name, primary, [x, y, width, height])`.
    pub fn monitors(&self) -> Vec<(String, bool, [i32; 4])> {
        let text = self.run_ok("xrandr", &["--listactivemonitors"]);
        text.lines()
            .skip(1)
            .map(|line| {
                // " 0: *RIGHT 960/254x1080/286+960+0  screen"
                let mut parts = line.split_whitespace().skip(1);
                let name = parts.next().unwrap();
                let geometry = parts.next().unwrap();
                let primary = name.trim_start_matches('+').starts_with('*');
                let name = name.trim_start_matches(['+', '*']).to_owned();
                let numbers: Vec<i32> = geometry
                    .split(['/', 'x', '+'])
                    .map(|n| n.parse().unwrap())
                    .collect();
                // w/mmw x h/mmh + x + y
                (
                    name,
                    primary,
                    [numbers[4], numbers[5], numbers[0], numbers[2]],
                )
            })
            .collect()
    }

    fn start_window_manager(&self) {
        // Openbox's stock configuration grabs keys such as Print and
        // Alt+Tab and mouse chords for itself; the tests' own has none, so
        // every key and click reaches the windows. New windows get the
        // focus.
        let config = self.dir.path().join("openbox-rc.xml");
        std::fs::write(&config, OPENBOX_CONFIG).unwrap();
        let mut command = self.command("openbox");
        command
            .arg("--sm-disable")
            .arg("--config-file")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.spawn_helper(command);
        let managed = eventually(X_WAIT, || {
            let Some(output) = self.run_for(
                "xprop",
                &["-root", "_NET_SUPPORTING_WM_CHECK", "_NET_SUPPORTED"],
                X_WAIT,
            ) else {
                return false;
            };
            let text = String::from_utf8_lossy(&output.stdout);
            text.contains("_NET_SUPPORTING_WM_CHECK(WINDOW): window id #")
                && text.contains("_NET_CLIENT_LIST")
                && text.contains("_NET_ACTIVE_WINDOW")
        });
        assert!(managed, "openbox did not manage the root within {X_WAIT:?}");
    }

    /// A connection of the test's own to the display.
    pub fn connect(&self) -> RustConnection {
        let (connection, _) = x11rb::connect(Some(&self.display())).unwrap();
        connection
    }

    /// The pointer's root position as `xdotool getmouselocation` reports it.
    pub fn pointer(&self) -> (i32, i32) {
        let text = self.run_ok("xdotool", &["getmouselocation", "--shell"]);
        let field = |name: &str| -> i32 {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {name} in {text:?}"))
                .parse()
                .unwrap()
        };
        (field("X"), field("Y"))
    }

    /// Moves the pointer from outside the shim (`xdotool mousemove`).
    pub fn move_pointer(&self, x: i32, y: i32) {
        self.run_ok("xdotool", &["mousemove", &x.to_string(), &y.to_string()]);
        assert!(
            eventually(X_WAIT, || self.pointer() == (x, y)),
            "the pointer did not reach ({x}, {y})"
        );
    }

    /// The window `xdotool getactivewindow` names (`_NET_ACTIVE_WINDOW`);
    /// `None` when there is none.
    pub fn active_window(&self) -> Option<u32> {
        let output = self.run_for("xdotool", &["getactivewindow"], X_WAIT)?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    }

    /// The window manager's client list (`_NET_CLIENT_LIST` of the root).
    pub fn window_list(&self) -> Vec<u32> {
        let text = self.run_ok("xprop", &["-root", "_NET_CLIENT_LIST"]);
        let Some((_, ids)) = text.split_once('#') else {
            return Vec::new();
        };
        ids.split(',')
            .filter_map(|id| u32::from_str_radix(id.trim().trim_start_matches("0x"), 16).ok())
            .collect()
    }

    /// The `CLIPBOARD`'s text as `xclip -o` reads it; `None` when nobody
    /// owns it, it has no text, or the owner did not answer within
    /// [`CLIPBOARD_WAIT`].
    pub fn clipboard(&self) -> Option<String> {
        let output = self.run_for("xclip", &["-selection", "clipboard", "-o"], CLIPBOARD_WAIT)?;
        if !output.status.success() {
            return None;
        }
        Some(String::from_utf8(output.stdout).unwrap())
    }

    /// Makes `xclip` the `CLIPBOARD`'s owner with `text` and waits until it
    /// serves it. The owner runs in the foreground (`-quiet`) as a helper,
    /// so it is killed with the server; it exits by itself when another
    /// client takes the selection. Returns the owner's pid.
    pub fn set_clipboard(&self, text: &str) -> u32 {
        let mut command = self.command("xclip");
        command
            .args(["-selection", "clipboard", "-i", "-quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        drop(stdin);
        let pid = child.id();
        self.helpers.lock().unwrap().push(child);
        assert!(
            eventually(X_WAIT, || self.clipboard().as_deref() == Some(text)),
            "xclip did not come to serve the clipboard"
        );
        pid
    }

    /// Binds each keysym (by name, e.g. `eacute` or `U2713`) to a keycode
    /// that has none, so typing it needs no temporary binding. A program
    /// that binds a spare keycode only for one key press and undoes it
    /// right after (as `xdotool type` does) races with the receiving
    /// client, which looks the keysym up only when it handles the event.
    pub fn bind_keysyms(&self, keysyms: &[&str]) {
        let map = self.run_ok("xmodmap", &["-pke"]);
        let free: Vec<&str> = map
            .lines()
            .filter_map(|line| {
                let (code, syms) = line.strip_prefix("keycode")?.split_once('=')?;
                syms.trim().is_empty().then_some(code.trim())
            })
            .collect();
        assert!(
            free.len() >= keysyms.len(),
            "too few free keycodes: {free:?}"
        );
        for (code, keysym) in free.iter().zip(keysyms) {
            self.run_ok("xmodmap", &["-e", &format!("keycode {code} = {keysym}")]);
        }
    }

    /// The pixels of the root window's rectangle `[x, y, width, height]`
    /// as the X server holds them (`GetImage`).
    pub fn capture(&self, rect: [i32; 4]) -> Image {
        let connection = self.connect();
        let setup = connection.setup();
        let screen = &setup.roots[0];
        let [x, y, width, height] = rect;
        let reply = connection
            .get_image(
                ImageFormat::Z_PIXMAP,
                screen.root,
                x as i16,
                y as i16,
                width as u16,
                height as u16,
                !0,
            )
            .unwrap()
            .reply()
            .unwrap();
        // Xvfb's 24-bit TrueColor screen: 32 bits per pixel, least
        // significant byte first, red in bits 16–23.
        assert_eq!(reply.depth, 24);
        assert_eq!(setup.image_byte_order, ImageOrder::LSB_FIRST);
        let format = setup.pixmap_formats.iter().find(|f| f.depth == 24).unwrap();
        assert_eq!(format.bits_per_pixel, 32);
        let visual = screen
            .allowed_depths
            .iter()
            .flat_map(|d| d.visuals.iter())
            .find(|v| v.visual_id == screen.root_visual)
            .unwrap();
        assert_eq!(
            (visual.red_mask, visual.green_mask, visual.blue_mask),
            (0xff0000, 0xff00, 0xff)
        );
        let rgb = reply
            .data
            .chunks_exact(4)
            .flat_map(|p| [p[2], p[1], p[0]])
            .collect();
        Image {
            width: width as u32,
            height: height as u32,
            rgb,
        }
    }

    /// One pixel of the screen.
    pub fn screen_pixel(&self, x: i32, y: i32) -> [u8; 3] {
        self.capture([x, y, 1, 1]).pixel(0, 0)
    }

    /// A number for names that must differ between the windows of one
    /// server.
    fn next_window(&self) -> usize {
        self.windows.fetch_add(1, Ordering::SeqCst)
    }
}

impl Drop for XServer {
    fn drop(&mut self) {
        for mut child in self.helpers.lock().unwrap().drain(..) {
            let _ = kill_group(child.id());
            let _ = child.wait();
        }
        // SIGTERM lets Xvfb remove its socket and lock file; SIGKILL only
        // if it does not end.
        let _ = signal_group(self.xvfb.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.xvfb.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = kill_group(self.xvfb.id());
        let _ = self.xvfb.wait();
    }
}

/// Sends SIGKILL to the process group led by `pid`.
fn kill_group(pid: u32) -> rustix::io::Result<()> {
    signal_group(pid, rustix::process::Signal::KILL)
}

/// Sends `signal` to the process group led by `pid`.
fn signal_group(pid: u32, signal: rustix::process::Signal) -> rustix::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process_group(pid, signal)
}

/// Runs `command` with `input` on its standard input; `None` (and the
/// command's process group killed) when it does not end within `timeout`.
pub fn run_with_timeout(
    mut command: Command,
    input: Option<&[u8]>,
    timeout: Duration,
) -> Option<Output> {
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(input) = input {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
    }
    let collect = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = collect(Box::new(child.stdout.take().unwrap()));
    let stderr = collect(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + timeout;
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = kill_group(child.id());
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Some(Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    })
}

/// Polls `check` until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A display number nobody listens on: far above what `-displayfd` hands
/// out, with no socket.
pub fn unused_display() -> String {
    let number = (50000..60000)
        .find(|n| !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists())
        .unwrap();
    format!(":{number}")
}

/// `#rrggbb`.
pub fn hex(colour: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", colour[0], colour[1], colour[2])
}

/// An RGB image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    /// Three bytes a pixel, row by row.
    pub rgb: Vec<u8>,
}

impl Image {
    /// The pixel at column `x`, row `y`.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        assert!(
            x < self.width && y < self.height,
            "({x}, {y}) is outside the {}x{} image",
            self.width,
            self.height
        );
        let at = ((y * self.width + x) * 3) as usize;
        [self.rgb[at], self.rgb[at + 1], self.rgb[at + 2]]
    }

    /// Whether every pixel of the rectangle `[x, y, width, height]` (in
    /// image coordinates) is `colour`; on failure, the first that is not.
    pub fn uniform(&self, rect: [u32; 4], colour: [u8; 3]) -> Result<(), String> {
        let [x0, y0, width, height] = rect;
        for y in y0..y0 + height {
            for x in x0..x0 + width {
                let found = self.pixel(x, y);
                if found != colour {
                    return Err(format!(
                        "pixel ({x}, {y}) is {} instead of {}",
                        hex(found),
                        hex(colour)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Decodes a PNG into RGB pixels (palette, grey and alpha expanded or
/// dropped, 16-bit samples cut to 8).
pub fn decode_png(bytes: &[u8]) -> Image {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("not a PNG");
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).expect("a broken PNG");
    let samples = &buffer[..info.buffer_size()];
    let rgb = match info.color_type {
        png::ColorType::Rgb => samples.to_vec(),
        png::ColorType::Rgba => samples
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => samples.iter().flat_map(|&g| [g, g, g]).collect(),
        png::ColorType::GrayscaleAlpha => samples
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        png::ColorType::Indexed => unreachable!("EXPAND turns a palette into RGB"),
    };
    Image {
        width: info.width,
        height: info.height,
        rgb,
    }
}

/// Whether `bytes` look like a JPEG file: the SOI marker first, the EOI
/// marker last.
pub fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xff, 0xd8, 0xff]) && bytes.ends_with(&[0xff, 0xd9])
}

/// A JPEG's `(width, height)` from its first start-of-frame marker
/// (`SOF0`–`SOF15` except the DHT, JPG and DAC markers); `None` when the
/// markers before it do not parse.
pub fn jpeg_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let mut at = 2;
    loop {
        if *bytes.get(at)? != 0xff {
            return None;
        }
        let marker = *bytes.get(at + 1)?;
        let length = usize::from(u16::from_be_bytes([
            *bytes.get(at + 2)?,
            *bytes.get(at + 3)?,
        ]));
        if (0xc0..=0xcf).contains(&marker) && ![0xc4, 0xc8, 0xcc].contains(&marker) {
            let segment = bytes.get(at + 4..at + 2 + length)?;
            let height = u16::from_be_bytes([segment[1], segment[2]]);
            let width = u16::from_be_bytes([segment[3], segment[4]]);
            return Some((u32::from(width), u32::from(height)));
        }
        at += 2 + length;
    }
}

/// An input event a [`TestWindow`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Mapped {
        pid: u32,
    },
    Press {
        button: u8,
        x: i32,
        y: i32,
        state: u32,
    },
    Release {
        button: u8,
        x: i32,
        y: i32,
        state: u32,
    },
    Motion {
        x: i32,
        y: i32,
    },
    Key {
        char: String,
        keysym: String,
        state: u32,
    },
    Paste {
        text: String,
    },
}

/// X modifier bits in an event's `state`.
pub const SHIFT_MASK: u32 = 1;
pub const CONTROL_MASK: u32 = 4;
pub const MOD1_MASK: u32 = 8;
pub const MOD4_MASK: u32 = 64;

impl Event {
    fn from_json(value: &Value) -> Option<Event> {
        let int = |key: &str| value[key].as_i64();
        let text = |key: &str| value[key].as_str().map(str::to_owned);
        Some(match value["event"].as_str()? {
            "mapped" => Event::Mapped {
                pid: int("pid")? as u32,
            },
            "press" => Event::Press {
                button: int("button")? as u8,
                x: int("x")? as i32,
                y: int("y")? as i32,
                state: int("state")? as u32,
            },
            "release" => Event::Release {
                button: int("button")? as u8,
                x: int("x")? as i32,
                y: int("y")? as i32,
                state: int("state")? as u32,
            },
            "motion" => Event::Motion {
                x: int("x")? as i32,
                y: int("y")? as i32,
            },
            "key" => Event::Key {
                char: text("char")?,
                keysym: text("keysym")?,
                state: int("state")? as u32,
            },
            "paste" => Event::Paste {
                text: text("text")?,
            },
            _ => return None,
        })
    }
}

/// A top-level window of `client.py` on an [`XServer`].
pub struct TestWindow {
    child: Option<Child>,
    events: PathBuf,
    window: u32,
    pid: u32,
    title: String,
    colour: [u8; 3],
    /// Which of the two marker points [`TestWindow::sync`] moves to next.
    marker: AtomicUsize,
}

impl TestWindow {
    /// Opens a window titled `title` with WM_CLASS `class` = (instance,
    /// class) (Tk wants the instance to start with a lower-case letter),
    /// background `colour`, asking for the outer geometry `[x, y, width,
    /// height]` (a window manager puts its frame there, so the client area
    /// sits a little lower and to the right: see [`TestWindow::bounds`]).
    /// Returns once the window is mapped, managed (with a window manager),
    /// painted and carries `_NET_WM_PID`.
    pub fn open(
        x: &XServer,
        title: &str,
        class: (&str, &str),
        colour: [u8; 3],
        geometry: [i32; 4],
    ) -> TestWindow {
        let n = x.next_window();
        let events = x.dir().join(format!("window-{n}.jsonl"));
        std::fs::write(&events, "").unwrap();
        let log = std::fs::File::create(x.dir().join(format!("window-{n}.log"))).unwrap();
        let arguments = json!({
            "events": events,
            "title": title,
            "instance": class.0,
            "class": class.1,
            "colour": hex(colour),
            "geometry": geometry,
        });
        let mut command = x.command(PYTHON);
        command
            .arg(CLIENT)
            .arg(arguments.to_string())
            .stdout(Stdio::null())
            .stderr(log);
        let child = command.spawn().unwrap();
        let mut window = TestWindow {
            child: Some(child),
            events,
            window: 0,
            pid: 0,
            title: title.to_owned(),
            colour,
            marker: AtomicUsize::new(0),
        };
        let mapped = eventually(X_WAIT, || {
            window
                .events()
                .iter()
                .any(|e| matches!(e, Event::Mapped { .. }))
        });
        assert!(
            mapped,
            "the test window {title:?} was not mapped: {}",
            std::fs::read_to_string(x.dir().join(format!("window-{n}.log"))).unwrap_or_default()
        );
        window.pid = window
            .events()
            .iter()
            .find_map(|e| match e {
                Event::Mapped { pid } => Some(*pid),
                _ => None,
            })
            .unwrap();
        window.window = find_window(x, title);
        // Tk does not set _NET_WM_PID, which the shim reads for the
        // window's pid.
        x.run_ok(
            "xprop",
            &[
                "-id",
                &window.window.to_string(),
                "-f",
                "_NET_WM_PID",
                "32c",
                "-set",
                "_NET_WM_PID",
                &window.pid.to_string(),
            ],
        );
        if x.has_window_manager() {
            assert!(
                eventually(X_WAIT, || x.window_list().contains(&window.window)),
                "the window manager did not manage {title:?}"
            );
        }
        // Placed and painted: the window stays where it is and its centre
        // shows its colour.
        let mut last = None;
        let settled = eventually(X_WAIT, || {
            let bounds = window.bounds(x);
            let (cx, cy) = centre(bounds);
            let painted = x.screen_pixel(cx, cy) == colour;
            let stable = last == Some(bounds);
            last = Some(bounds);
            painted && stable
        });
        assert!(settled, "the test window {title:?} was not painted");
        window
    }

    /// The X id of the client window (the one the window manager manages).
    pub fn window_id(&self) -> u32 {
        self.window
    }

    /// The client program's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn title(&self) -> &str {
        &self.title
    }

    pub fn colour(&self) -> [u8; 3] {
        self.colour
    }

    /// The client area in root coordinates, `[x1, y1, x2, y2]` (`x2`, `y2`
    /// exclusive), as the X server has it now.
    pub fn bounds(&self, x: &XServer) -> [i32; 4] {
        let connection = x.connect();
        let root = connection.setup().roots[0].root;
        let geometry = connection
            .get_geometry(self.window)
            .unwrap()
            .reply()
            .unwrap();
        let origin = connection
            .translate_coordinates(self.window, root, 0, 0)
            .unwrap()
            .reply()
            .unwrap();
        let (x1, y1) = (i32::from(origin.dst_x), i32::from(origin.dst_y));
        [
            x1,
            y1,
            x1 + i32::from(geometry.width),
            y1 + i32::from(geometry.height),
        ]
    }

    /// The centre of the client area.
    pub fn centre(&self, x: &XServer) -> (i32, i32) {
        centre(self.bounds(x))
    }

    /// Makes this the active window from outside the shim
    /// (`xdotool windowactivate --sync`) and waits until it has the focus.
    pub fn activate(&self, x: &XServer) {
        x.run_ok(
            "xdotool",
            &["windowactivate", "--sync", &self.window.to_string()],
        );
        assert!(
            eventually(X_WAIT, || x.active_window() == Some(self.window)),
            "{:?} did not become the active window",
            self.title
        );
    }

    /// Every event received so far, in order.
    pub fn events(&self) -> Vec<Event> {
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        // A line still being written is not complete JSON yet: skipped.
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|value| Event::from_json(&value))
            .collect()
    }

    /// The events after the first `mark` ones (see [`TestWindow::mark`]).
    pub fn events_since(&self, mark: usize) -> Vec<Event> {
        self.events().into_iter().skip(mark).collect()
    }

    /// How many events were received so far, to look only at later ones.
    pub fn mark(&self) -> usize {
        self.events().len()
    }

    /// The text typed into the window: the characters its key events
    /// produced, Return as `\n`, pasted text included; keys pressed with
    /// Control or Alt held, and keys that produce no character (modifiers,
    /// function keys), add nothing.
    pub fn typed(&self) -> String {
        typed_text(&self.events())
    }

    /// Waits until exactly `expected` has been typed; panics with what was
    /// received instead.
    pub fn wait_typed(&self, expected: &str, timeout: Duration) {
        let arrived = eventually(timeout, || self.typed() == expected);
        assert!(
            arrived,
            "typed {:?} instead of {expected:?}; events: {:?}",
            self.typed(),
            self.events()
        );
    }

    /// The button presses received: `(button, x, y)` in root coordinates.
    pub fn presses(&self) -> Vec<(u8, i32, i32)> {
        presses_in(&self.events())
    }

    /// Waits until at least `count` button presses and as many releases
    /// have arrived; returns the presses.
    pub fn wait_presses(&self, count: usize, timeout: Duration) -> Vec<(u8, i32, i32)> {
        let done = eventually(timeout, || {
            let events = self.events();
            let releases = events
                .iter()
                .filter(|e| matches!(e, Event::Release { .. }))
                .count();
            presses_in(&events).len() >= count && releases >= count
        });
        assert!(
            done,
            "fewer than {count} clicks arrived: {:?}",
            self.events()
        );
        self.presses()
    }

    /// Waits until a press and a release of `button` at `at` (root
    /// coordinates) have arrived.
    pub fn wait_click(&self, button: u8, at: (i32, i32), timeout: Duration) {
        let (x, y) = at;
        let clicked = eventually(timeout, || {
            let events = self.events();
            let pressed = events.iter().position(
                |e| matches!(e, Event::Press { button: b, x: px, y: py, .. } if *b == button && (*px, *py) == (x, y)),
            );
            pressed.is_some_and(|p| {
                events[p..]
                    .iter()
                    .any(|e| matches!(e, Event::Release { button: b, .. } if *b == button))
            })
        });
        assert!(
            clicked,
            "no click of button {button} at {at:?}: {:?}",
            self.events()
        );
    }

    /// The last pointer position the window saw (motion, press or release).
    pub fn last_position(&self) -> Option<(i32, i32)> {
        self.events().iter().rev().find_map(|e| match e {
            Event::Motion { x, y } | Event::Press { x, y, .. } | Event::Release { x, y, .. } => {
                Some((*x, *y))
            }
            _ => None,
        })
    }

    /// Makes sure the window has handled every event the X server had for
    /// it before this call: moves the pointer (from outside, with
    /// `xdotool`) to a marker point inside the window and waits until the
    /// window reports that motion, which the server delivers after
    /// everything queued before it. Returns the number of events before
    /// the marker, for "nothing arrived" checks. Moves the pointer.
    pub fn sync(&self, x: &XServer) -> usize {
        let [_, _, x2, y2] = self.bounds(x);
        let n = self.marker.fetch_add(1, Ordering::SeqCst) as i32;
        let at = (x2 - 3 - n % 2, y2 - 3);
        let before = self.mark();
        x.run_ok(
            "xdotool",
            &["mousemove", &at.0.to_string(), &at.1.to_string()],
        );
        let seen = eventually(X_WAIT, || {
            self.events_since(before)
                .contains(&Event::Motion { x: at.0, y: at.1 })
        });
        assert!(seen, "{:?} did not see the marker motion", self.title);
        let events = self.events();
        before
            + events[before..]
                .iter()
                .position(|e| *e == Event::Motion { x: at.0, y: at.1 })
                .unwrap()
    }

    /// Ends the client and waits until its window is gone.
    pub fn close(&mut self, x: &XServer) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_group(child.id());
            let _ = child.wait();
        }
        let window = self.window;
        let gone = eventually(X_WAIT, || {
            let connection = x.connect();
            let alive = connection
                .get_geometry(window)
                .ok()
                .and_then(|cookie| cookie.reply().ok())
                .is_some();
            !alive && !x.window_list().contains(&window)
        });
        assert!(gone, "the window of {:?} stayed", self.title);
    }
}

impl Drop for TestWindow {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_group(child.id());
            let _ = child.wait();
        }
    }
}

/// The centre of `[x1, y1, x2, y2]`.
pub fn centre(bounds: [i32; 4]) -> (i32, i32) {
    ((bounds[0] + bounds[2]) / 2, (bounds[1] + bounds[3]) / 2)
}

/// The presses among `events`.
pub fn presses_in(events: &[Event]) -> Vec<(u8, i32, i32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Press { button, x, y, .. } => Some((*button, *x, *y)),
            _ => None,
        })
        .collect()
}

/// The key events among `events`: `(keysym, state)`.
pub fn keys_in(events: &[Event]) -> Vec<(String, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Key { keysym, state, .. } => Some((keysym.clone(), *state)),
            _ => None,
        })
        .collect()
}

/// The text `events` typed (see [`TestWindow::typed`]).
pub fn typed_text(events: &[Event]) -> String {
    let mut text = String::new();
    for event in events {
        match event {
            Event::Key {
                char,
                keysym,
                state,
            } => {
                if state & (CONTROL_MASK | MOD1_MASK) != 0 {
                    continue;
                }
                if keysym == "Return" || keysym == "KP_Enter" {
                    text.push('\n');
                } else {
                    text.push_str(char);
                }
            }
            Event::Paste { text: pasted } => text.push_str(pasted),
            _ => {}
        }
    }
    text
}

/// The X id of the one viewable window titled exactly `title`
/// (`_NET_WM_NAME`, else `WM_NAME`), waiting until it exists. Searched with
/// the test's own connection: `xdotool search --name` cannot match titles
/// outside Latin-1.
fn find_window(x: &XServer, title: &str) -> u32 {
    let mut found = Vec::new();
    let exists = eventually(X_WAIT, || {
        found = windows_titled(x, title);
        !found.is_empty()
    });
    assert!(exists, "no window titled {title:?}");
    assert_eq!(found.len(), 1, "more than one window titled {title:?}");
    found[0]
}

/// Every viewable window below the root whose title is `title`.
fn windows_titled(x: &XServer, title: &str) -> Vec<u32> {
    use x11rb::protocol::xproto::{AtomEnum, MapState};
    let connection = x.connect();
    let root = connection.setup().roots[0].root;
    let atom = |name: &str| {
        connection
            .intern_atom(false, name.as_bytes())
            .unwrap()
            .reply()
            .unwrap()
            .atom
    };
    let net_wm_name = atom("_NET_WM_NAME");
    let utf8 = atom("UTF8_STRING");
    let title_of = |window: u32| -> Option<String> {
        for (property, kind) in [
            (net_wm_name, utf8),
            (AtomEnum::WM_NAME.into(), AtomEnum::STRING.into()),
        ] {
            let reply = connection
                .get_property(false, window, property, kind, 0, 4096)
                .ok()?
                .reply()
                .ok()?;
            if reply.type_ == kind {
                return Some(String::from_utf8_lossy(&reply.value).into_owned());
            }
        }
        None
    };
    let mut found = Vec::new();
    let mut pending = vec![root];
    while let Some(window) = pending.pop() {
        let Some(tree) = connection
            .query_tree(window)
            .ok()
            .and_then(|c| c.reply().ok())
        else {
            continue;
        };
        for child in tree.children {
            let viewable = connection
                .get_window_attributes(child)
                .ok()
                .and_then(|c| c.reply().ok())
                .is_some_and(|a| a.map_state == MapState::VIEWABLE);
            if !viewable {
                continue;
            }
            if title_of(child).as_deref() == Some(title) {
                found.push(child);
            }
            pending.push(child);
        }
    }
    found
}
