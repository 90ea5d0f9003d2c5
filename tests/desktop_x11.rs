//! Computer use on Linux/X11 end to end (CAPABILITIES.md §1, §2, §4): the
//! real `autogpt-shim start --session-id … --enable-computer-use` with
//! `DISPLAY` on a private X server (tests/desktop_support), against the
//! platform emulator, checked from outside: what the test windows receive,
//! where the pointer is, which window is active, what is on the clipboard,
//! what the screenshots show, and what the audit log holds.
//!
//! Also the sensitive-window masking of screenshots and input: the
//! `screenshot_mask` setting (TOML list of strings, env
//! `AUTOGPT_SHIM_SCREENSHOT_MASK` as a JSON array) with `class:`, `title:`
//! and `rect:` entries on top of built-in password-manager and prompt
//! classes.
//!
//! Every test has its own X server, shim and emulator.
#![cfg(feature = "desktop")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod desktop_support;
mod start_support;

use std::time::{Duration, Instant};

use autogpt_shim_emulator::wire::is_canonical_uuid_v4;
use autogpt_shim_emulator::{Conn, Emulator, Ending, HelloAck};
use base64::Engine as _;
use desktop_support::*;
use serde_json::{Value, json};
use start_support::{Home, SESSION, Shim, WAIT, emulator};

/// What the tests grant unless they test the grant.
const GRANT: [&str; 2] = ["files", "computer_use"];

const RED: [u8; 3] = [0xd0, 0x20, 0x20];
const GREEN: [u8; 3] = [0x20, 0xb0, 0x40];
const BLUE: [u8; 3] = [0x20, 0x40, 0xd0];
const YELLOW: [u8; 3] = [0xe0, 0xd0, 0x30];
const BLACK: [u8; 3] = [0, 0, 0];

/// §4.1 coarse features on X11, before `windows` and `clipboard`.
const COARSE: [&str; 4] = ["screenshot", "input", "apps", "permissions"];

/// §4.1 fine features on X11, before the window and clipboard ones.
const FEATURES: [&str; 13] = [
    "screenshot.region",
    "input.click.modifiers",
    "input.click.button",
    "input.drag.path",
    "input.key.hold",
    "input.mouse.down_up",
    "input.scroll.amount",
    "input.wait",
    "cursor.position",
    "display.info",
    "app.list",
    "app.launch",
    "permissions.check",
];

/// X modifier bits in a test window's event state.
const CTRL_SHIFT: u32 = CONTROL_MASK | SHIFT_MASK;

// --- fixture -------------------------------------------------------------

/// Where the shim's `DISPLAY` points.
enum Display {
    /// The test's X server.
    Own,
    /// No `DISPLAY` at all.
    Unset,
    /// This value.
    Fixed(String),
}

/// How a test starts its X server and shim.
struct Setup {
    options: XServerOptions,
    flags: Vec<String>,
    env: Vec<(String, String)>,
    ack: HelloAck,
    display: Display,
    config: Option<String>,
}

/// An X server with `openbox`, a shim started with
/// `--enable-computer-use` on it, and the emulator granting
/// `files` and `computer_use`.
fn setup() -> Setup {
    Setup {
        options: XServerOptions::new().window_manager(),
        flags: vec!["--enable-computer-use".into()],
        env: Vec::new(),
        ack: HelloAck::new().grant(GRANT),
        display: Display::Own,
        config: None,
    }
}

impl Setup {
    fn options(mut self, options: XServerOptions) -> Setup {
        self.options = options;
        self
    }

    fn flag(mut self, flag: &str) -> Setup {
        self.flags.push(flag.into());
        self
    }

    /// Starts the shim without `--enable-computer-use`.
    fn without_flags(mut self) -> Setup {
        self.flags.clear();
        self
    }

    fn env(mut self, key: &str, value: &str) -> Setup {
        self.env.push((key.into(), value.into()));
        self
    }

    fn ack(mut self, ack: HelloAck) -> Setup {
        self.ack = ack;
        self
    }

    fn display(mut self, display: Display) -> Setup {
        self.display = display;
        self
    }

    /// Writes this `config.toml` into the shim's configuration directory.
    fn config(mut self, toml: &str) -> Setup {
        self.config = Some(toml.into());
        self
    }

    fn start(self) -> Desk {
        let x = XServer::start(self.options);
        let home = Home::new();
        if let Some(toml) = &self.config {
            let dir = home.path().join("config/autogpt-local-executor");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("config.toml"), toml).unwrap();
        }
        // The shim's environment is the home's, rebuilt from nothing: no
        // Wayland variable reaches it unless the test adds one.
        assert!(
            home.env()
                .iter()
                .all(|(k, _)| k != "WAYLAND_DISPLAY" && k != "XDG_SESSION_TYPE" && k != "DISPLAY")
        );
        let mut env = self.env.clone();
        match &self.display {
            Display::Own => env.push(("DISPLAY".into(), x.display())),
            Display::Unset => {}
            Display::Fixed(value) => env.push(("DISPLAY".into(), value.clone())),
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let emulator = emulator();
        let mut shim = Shim::start_with_env(&home, &emulator, &env, &flags);
        let (conn, hello) = handshake(&mut shim, &emulator, self.ack);
        Desk {
            conn,
            hello,
            shim,
            emulator,
            home,
            x,
        }
    }
}

/// Accepts the shim's next connection and completes the handshake with
/// `ack`; fails at once, with the shim's output, when the shim exits first.
fn handshake(shim: &mut Shim, emulator: &Emulator, ack: HelloAck) -> (Conn, Value) {
    let deadline = Instant::now() + WAIT;
    let conn = loop {
        if let Some(conn) = emulator.accept(Duration::from_millis(100)) {
            break conn;
        }
        if let Ok(Some(status)) = shim.child.try_wait() {
            std::thread::sleep(Duration::from_millis(50));
            panic!(
                "the shim exited ({status}) before connecting\n{}",
                shim.output()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the shim did not connect\n{}",
            shim.output()
        );
    };
    let hello = conn.expect_hello(WAIT);
    conn.send_hello_ack(&ack.session_id(SESSION)).unwrap();
    (conn, hello)
}

/// A running shim on a private X server. Dropped in field order: the
/// connection, the shim, the emulator, the home, then the X server.
struct Desk {
    conn: Conn,
    hello: Value,
    shim: Shim,
    emulator: Emulator,
    home: Home,
    x: XServer,
}

/// The response type of a computer-use request.
fn response_type(request: &str) -> &'static str {
    match request {
        "SCREENSHOT_REQUEST" => "SCREENSHOT_RESPONSE",
        "CURSOR_POSITION_REQUEST" => "CURSOR_POSITION_RESPONSE",
        "DISPLAY_INFO_REQUEST" => "DISPLAY_INFO_RESPONSE",
        "WINDOW_LIST_REQUEST" => "WINDOW_LIST_RESPONSE",
        "APP_LIST_REQUEST" => "APP_LIST_RESPONSE",
        "CLIPBOARD_READ" => "CLIPBOARD_READ_RESPONSE",
        "PERMISSIONS_CHECK_REQUEST" => "PERMISSIONS_CHECK_RESPONSE",
        "INPUT_ACTION" | "WINDOW_FOCUS" | "APP_LAUNCH" | "CLIPBOARD_WRITE" => "ACK",
        other => panic!("not a computer-use request: {other}"),
    }
}

impl Desk {
    /// The HELLO's payload.
    fn hello(&self) -> &Value {
        &self.hello["payload"]
    }

    /// Sends a request; returns its id and the whole response frame.
    fn call(&self, message_type: &str, payload: Value) -> (String, Value) {
        let id = self.conn.request(message_type, payload).unwrap();
        let response = self.conn.wait_response(&id, WAIT).unwrap_or_else(|| {
            panic!("no response to {message_type} {id}\n{}", self.shim.output())
        });
        (id, response)
    }

    /// A request that must succeed: its id and the response's payload.
    fn ok(&self, message_type: &str, payload: Value) -> (String, Value) {
        let (id, response) = self.call(message_type, payload.clone());
        assert_eq!(
            response["type"],
            response_type(message_type),
            "{message_type} {payload} was answered {response}\n{}",
            self.shim.output()
        );
        (id, response["payload"].clone())
    }

    /// A request that must fail: its id and the `ERROR` payload.
    fn refused(&self, message_type: &str, payload: Value) -> (String, Value) {
        let (id, response) = self.call(message_type, payload.clone());
        assert_eq!(
            response["type"], "ERROR",
            "{message_type} {payload} was answered {response}"
        );
        assert_eq!(response["payload"]["fatal"], false, "{response}");
        (id, response["payload"].clone())
    }

    /// An `INPUT_ACTION` that must be acknowledged.
    fn input(&self, payload: Value) -> String {
        let (id, ack) = self.ok("INPUT_ACTION", payload);
        assert_eq!(ack, json!({"ok": true}));
        id
    }

    /// A screenshot that must succeed: id, payload and the image bytes.
    fn screenshot(&self, payload: Value) -> (String, Value, Vec<u8>) {
        let (id, response) = self.ok("SCREENSHOT_REQUEST", payload);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(response["image_base64"].as_str().unwrap())
            .unwrap();
        (id, response, bytes)
    }

    /// A lossless screenshot of the whole primary monitor without the
    /// cursor, decoded.
    fn picture(&self) -> Image {
        let (_, _, bytes) = self.screenshot(json!({"format": "png", "include_cursor": false}));
        decode_png(&bytes)
    }

    /// The one audit record of request `id`.
    fn record(&self, id: &str) -> Value {
        let records: Vec<Value> = self
            .home
            .records()
            .into_iter()
            .filter(|r| r["request_id"] == id)
            .collect();
        assert_eq!(records.len(), 1, "records of {id}: {records:?}");
        records[0].clone()
    }

    /// Whether request `id` left no audit record.
    fn no_record(&self, id: &str) -> bool {
        self.home.records().iter().all(|r| r["request_id"] != id)
    }

    fn window(
        &self,
        title: &str,
        class: (&str, &str),
        colour: [u8; 3],
        at: [i32; 4],
    ) -> TestWindow {
        TestWindow::open(&self.x, title, class, colour, at)
    }

    /// The `WINDOW_LIST_RESPONSE` entries.
    fn windows(&self) -> Vec<Value> {
        let (_, list) = self.ok("WINDOW_LIST_REQUEST", json!({}));
        list["windows"].as_array().unwrap().clone()
    }

    /// The `window_id` a fresh list gives `window` (found by its pid).
    fn id_of(&self, window: &TestWindow) -> String {
        let windows = self.windows();
        entry_of(&windows, window)["window_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Asserts that `text` is nowhere in the home (audit log, state, …)
    /// nor in the shim's output, as it is or JSON-escaped.
    fn assert_never_logged(&self, text: &str) {
        let escaped = ascii_escaped(text);
        let everything = format!("{}{}", self.home.all_text(), self.shim.output());
        assert!(!everything.contains(text), "{text:?} was logged");
        assert!(!everything.contains(&escaped), "{escaped:?} was logged");
    }
}

/// The list entry of `window`, found by its pid.
fn entry_of<'a>(windows: &'a [Value], window: &TestWindow) -> &'a Value {
    windows
        .iter()
        .find(|w| w["pid"] == window.pid())
        .unwrap_or_else(|| panic!("{:?} is not listed: {windows:?}", window.title()))
}

/// `text` with every non-ASCII char as JSON `\uXXXX` escapes.
fn ascii_escaped(text: &str) -> String {
    let mut escaped = String::new();
    for unit in text.encode_utf16() {
        if unit < 0x80 {
            escaped.push(char::from(unit as u8));
        } else {
            escaped.push_str(&format!("\\u{unit:04x}"));
        }
    }
    escaped
}

/// Asserts an `ERROR` payload exactly.
fn assert_error(error: &Value, code: &str, message: &str, details: Value) {
    assert_eq!(
        error,
        &json!({"code": code, "message": message, "fatal": false, "details": details})
    );
}

/// Asserts a `FEATURE_NOT_SUPPORTED` for `feature`, with `reason` when
/// given (then the message is exact).
fn assert_unsupported(error: &Value, feature: &str, reason: Option<&str>) {
    assert_eq!(error["code"], "FEATURE_NOT_SUPPORTED", "{error}");
    assert_eq!(error["details"]["feature"], feature, "{error}");
    let prefix = format!("feature '{feature}' is not supported on this backend");
    match reason {
        Some(reason) => {
            assert_eq!(error["details"]["reason"], reason, "{error}");
            assert_eq!(error["message"], format!("{prefix}: {reason}"), "{error}");
        }
        None => assert!(
            error["message"].as_str().unwrap().starts_with(&prefix),
            "{error}"
        ),
    }
}

/// The key names of a record's or payload's object, sorted.
fn keys(object: &Value) -> Vec<String> {
    let mut keys: Vec<String> = object.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    names.sort();
    names
}

fn strings(names: &[&str]) -> Value {
    json!(names)
}

/// A point inside `bounds` at `(dx, dy)` from its top-left corner.
fn at(bounds: [i32; 4], dx: i32, dy: i32) -> (i32, i32) {
    (bounds[0] + dx, bounds[1] + dy)
}

/// The client area of `bounds` in the coordinates of an image whose
/// top-left is the screen point `origin`, shrunk by `inset` on every side:
/// `[x, y, width, height]`.
fn in_image(bounds: [i32; 4], origin: (i32, i32), inset: i32) -> [u32; 4] {
    [
        (bounds[0] - origin.0 + inset) as u32,
        (bounds[1] - origin.1 + inset) as u32,
        (bounds[2] - bounds[0] - 2 * inset) as u32,
        (bounds[3] - bounds[1] - 2 * inset) as u32,
    ]
}

/// Whether `window_id` is a shim-minted id: `win_` and a canonical UUID v4.
fn is_minted(window_id: &str) -> bool {
    window_id
        .strip_prefix("win_")
        .is_some_and(is_canonical_uuid_v4)
}

// --- HELLO (§2, §4.1) ------------------------------------------------------

/// The HELLO fields of a shim that does not advertise computer use.
fn assert_not_advertised(hello: &Value) {
    assert_eq!(hello["capabilities"], json!(["files"]), "{hello}");
    assert_eq!(hello["screen_resolution"], Value::Null);
    assert_eq!(hello["computer_use_features"], json!([]));
    assert_eq!(hello["computer_use_features_coarse"], json!([]));
}

#[test]
fn hello_advertises_computer_use_with_the_root_size_and_the_window_features_under_a_window_manager()
{
    let desk = setup().start();
    let hello = desk.hello();
    assert_eq!(hello["capabilities"], json!(["files", "computer_use"]));
    assert_eq!(hello["screen_resolution"], json!([1920, 1080]));
    let mut coarse = COARSE.to_vec();
    coarse.push("windows");
    assert_eq!(hello["computer_use_features_coarse"], strings(&coarse));
    let mut features = FEATURES.to_vec();
    features.extend(["window.list", "window.focus"]);
    assert_eq!(hello["computer_use_features"], strings(&features));
}

#[test]
fn hello_with_enable_clipboard_adds_the_clipboard_features_last() {
    let desk = setup().flag("--enable-clipboard").start();
    let hello = desk.hello();
    let mut coarse = COARSE.to_vec();
    coarse.extend(["windows", "clipboard"]);
    assert_eq!(hello["computer_use_features_coarse"], strings(&coarse));
    let mut features = FEATURES.to_vec();
    features.extend([
        "window.list",
        "window.focus",
        "clipboard.read",
        "clipboard.write",
    ]);
    assert_eq!(hello["computer_use_features"], strings(&features));
}

#[test]
fn hello_without_a_window_manager_lists_no_window_features() {
    let desk = setup()
        .options(XServerOptions::new())
        .flag("--enable-clipboard")
        .start();
    let hello = desk.hello();
    assert_eq!(hello["capabilities"], json!(["files", "computer_use"]));
    let mut coarse = COARSE.to_vec();
    coarse.push("clipboard");
    assert_eq!(hello["computer_use_features_coarse"], strings(&coarse));
    let mut features = FEATURES.to_vec();
    features.extend(["clipboard.read", "clipboard.write"]);
    assert_eq!(hello["computer_use_features"], strings(&features));
}

#[test]
fn computer_use_and_the_clipboard_can_be_switched_on_through_the_environment() {
    let desk = setup()
        .without_flags()
        .env("AUTOGPT_SHIM_ENABLE_COMPUTER_USE", "true")
        .env("AUTOGPT_SHIM_ENABLE_CLIPBOARD", "true")
        .start();
    let hello = desk.hello();
    assert_eq!(hello["capabilities"], json!(["files", "computer_use"]));
    let coarse = hello["computer_use_features_coarse"].as_array().unwrap();
    assert_eq!(coarse.last().unwrap(), "clipboard", "{hello}");
}

#[test]
fn hello_does_not_advertise_computer_use_when_wayland_display_is_set() {
    let desk = setup()
        .env("WAYLAND_DISPLAY", "wayland-0")
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn hello_does_not_advertise_computer_use_in_a_wayland_session_type_in_any_case() {
    let desk = setup()
        .env("XDG_SESSION_TYPE", "Wayland")
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn hello_advertises_computer_use_with_an_x11_session_type_and_an_empty_wayland_display() {
    let desk = setup()
        .env("XDG_SESSION_TYPE", "x11")
        .env("WAYLAND_DISPLAY", "")
        .start();
    assert_eq!(
        desk.hello()["capabilities"],
        json!(["files", "computer_use"])
    );
}

#[test]
fn hello_does_not_advertise_computer_use_without_display() {
    let desk = setup()
        .display(Display::Unset)
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn hello_does_not_advertise_computer_use_when_nobody_listens_on_display() {
    let desk = setup()
        .display(Display::Fixed(unused_display()))
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn hello_does_not_advertise_computer_use_without_the_xtest_extension() {
    let desk = setup()
        .options(XServerOptions::new().window_manager().without_xtest())
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn hello_does_not_advertise_computer_use_without_the_randr_extension() {
    let desk = setup()
        .options(XServerOptions::new().window_manager().without_randr())
        .ack(HelloAck::new().grant(["files"]))
        .start();
    assert_not_advertised(desk.hello());
}

#[test]
fn a_grant_of_computer_use_without_enable_computer_use_closes_4400_and_stops() {
    let mut desk = setup().without_flags().start();
    assert_not_advertised(desk.hello());
    let ending = desk
        .conn
        .wait_closed(WAIT)
        .expect("the shim kept the connection");
    match ending {
        Ending::ClosedByShim { code, reason } => {
            assert_eq!(code, Some(4400));
            assert_eq!(reason, "HELLO_ACK granted unadvertised capability");
        }
        other => panic!("{other:?}"),
    }
    // No reconnect: the session has failed.
    assert!(desk.emulator.accept(Duration::from_secs(2)).is_none());
    desk.shim.wait(WAIT);
}

// --- gates (§1) -----------------------------------------------------------

#[test]
fn computer_use_requests_without_the_grant_are_refused_with_the_capability_details() {
    let desk = setup().ack(HelloAck::new().grant(["files"])).start();
    assert_eq!(
        desk.hello()["capabilities"],
        json!(["files", "computer_use"])
    );
    let requests = [
        ("SCREENSHOT_REQUEST", json!({})),
        (
            "INPUT_ACTION",
            json!({"action": "mouse_move", "coordinate": [5, 5]}),
        ),
        ("CURSOR_POSITION_REQUEST", json!({})),
        ("DISPLAY_INFO_REQUEST", json!({})),
        ("WINDOW_LIST_REQUEST", json!({})),
        ("WINDOW_FOCUS", json!({"window_id": "win_x"})),
        ("APP_LIST_REQUEST", json!({})),
        ("APP_LAUNCH", json!({"executable_path": "/bin/true"})),
        ("CLIPBOARD_READ", json!({})),
        ("CLIPBOARD_WRITE", json!({"format": "text", "content": "x"})),
        ("PERMISSIONS_CHECK_REQUEST", json!({"permissions": []})),
    ];
    let before = desk.x.pointer();
    for (message_type, payload) in requests {
        let (id, error) = desk.refused(message_type, payload);
        assert_error(
            &error,
            "CAPABILITY_NOT_GRANTED",
            "The platform did not grant the 'computer_use' capability.",
            json!({"required_capability": "computer_use", "granted_capabilities": ["files"]}),
        );
        assert!(desk.no_record(&id), "{message_type} was audited");
    }
    assert_eq!(desk.x.pointer(), before);
}

// --- DISPLAY_INFO (§4.4) -----------------------------------------------------

fn monitor(index: usize, primary: bool, rect: [i32; 4]) -> Value {
    let [x, y, width, height] = rect;
    json!({
        "index": index,
        "primary": primary,
        "physical_size": [width, height],
        "logical_size": [width, height],
        "scale": 1.0,
        "origin": [x, y],
    })
}

#[test]
fn display_info_reports_one_primary_monitor_of_the_root_size() {
    let desk = setup().start();
    let (id, info) = desk.ok("DISPLAY_INFO_REQUEST", json!({}));
    assert_eq!(
        info,
        json!({"monitors": [monitor(0, true, [0, 0, 1920, 1080])]})
    );
    let record = desk.record(&id);
    assert_eq!(record["op"], "DISPLAY_INFO_REQUEST");
    assert_eq!(record["details"], json!({"monitor_count": 1}));
    assert_eq!(record["result"]["ok"], true);
}

#[test]
fn display_info_lists_the_randr_primary_first() {
    let desk = setup()
        .options(
            XServerOptions::new()
                .window_manager()
                .two_monitors(Primary::Right),
        )
        .start();
    assert_eq!(desk.hello()["screen_resolution"], json!([1920, 1080]));
    let (id, info) = desk.ok("DISPLAY_INFO_REQUEST", json!({}));
    assert_eq!(
        info,
        json!({"monitors": [
            monitor(0, true, RIGHT_MONITOR),
            monitor(1, false, LEFT_MONITOR),
        ]})
    );
    assert_eq!(desk.record(&id)["details"], json!({"monitor_count": 2}));
}

#[test]
fn display_info_orders_the_other_monitors_by_y_then_x() {
    // Four quarters, created in an order that is neither (y, x) nor
    // (x, y); the bottom-right one is primary.
    let top_left = [0, 0, 960, 540];
    let top_right = [960, 0, 960, 540];
    let bottom_left = [0, 540, 960, 540];
    let bottom_right = [960, 540, 960, 540];
    let desk = setup()
        .options(
            XServerOptions::new().monitors(&[bottom_left, bottom_right, top_right, top_left], 1),
        )
        .start();
    let (_, info) = desk.ok("DISPLAY_INFO_REQUEST", json!({}));
    assert_eq!(
        info,
        json!({"monitors": [
            monitor(0, true, bottom_right),
            monitor(1, false, top_left),
            monitor(2, false, top_right),
            monitor(3, false, bottom_left),
        ]})
    );
}

// --- SCREENSHOT (§4.5) -------------------------------------------------------

#[test]
fn a_png_screenshot_of_a_region_shows_the_window_in_its_colour_where_it_is() {
    let desk = setup().start();
    let w = desk.window("Red", ("red", "Red"), RED, [300, 200, 400, 300]);
    let bounds = w.bounds(&desk.x);
    let region = [
        bounds[0] - 50,
        bounds[1] - 60,
        bounds[2] + 50,
        bounds[3] + 40,
    ];
    let (id, response, bytes) = desk.screenshot(json!({
        "format": "png", "region": region, "include_cursor": false,
    }));
    let (width, height) = (region[2] - region[0], region[3] - region[1]);
    let mut expected = response.clone();
    expected.as_object_mut().unwrap().remove("image_base64");
    assert_eq!(
        expected,
        json!({
            "mime_type": "image/png",
            "width": width,
            "height": height,
            "monitor": 0,
            "region": region,
            "display_scale": 1.0,
            "logical_size": [1920, 1080],
            "meta": {"origin": [region[0], region[1]], "display_id": 0},
        })
    );
    let image = decode_png(&bytes);
    assert_eq!((image.width, image.height), (width as u32, height as u32));
    image
        .uniform(in_image(bounds, (region[0], region[1]), 0), RED)
        .unwrap();
    // Beside the window and its frame: the root.
    assert_eq!(image.pixel(5, 5), ROOT_COLOUR);
    assert_eq!(
        image.pixel(width as u32 - 5, height as u32 - 5),
        ROOT_COLOUR
    );

    let record = desk.record(&id);
    assert_eq!(record["op"], "SCREENSHOT_REQUEST");
    assert_eq!(record["result"]["ok"], true);
    assert_eq!(
        record["details"],
        json!({
            "monitor": 0,
            "quality": 75,
            "region": region,
            "window_id": null,
            "format": "png",
            "image_bytes_returned": bytes.len(),
            "width": width,
            "height": height,
            "masked_regions": 0,
        })
    );
}

#[test]
fn a_screenshot_is_a_jpeg_of_the_whole_primary_monitor_by_default() {
    let desk = setup().start();
    let (id, response, bytes) = desk.screenshot(json!({}));
    assert_eq!(response["mime_type"], "image/jpeg");
    assert!(is_jpeg(&bytes));
    assert_eq!(jpeg_size(&bytes), Some((1920, 1080)));
    assert_eq!(response["width"], 1920);
    assert_eq!(response["height"], 1080);
    assert_eq!(response["region"], Value::Null);
    assert_eq!(response["monitor"], 0);
    assert_eq!(response["logical_size"], json!([1920, 1080]));
    assert_eq!(response["meta"], json!({"origin": [0, 0], "display_id": 0}));
    let details = &desk.record(&id)["details"];
    assert_eq!(details["format"], "jpeg");
    assert_eq!(details["quality"], 75);
    assert_eq!(details["region"], Value::Null);
    assert_eq!(details["image_bytes_returned"], bytes.len());
    assert_eq!(
        (details["width"].clone(), details["height"].clone()),
        (json!(1920), json!(1080))
    );
}

#[test]
fn a_screenshot_region_is_cut_to_the_monitor_and_echoed_as_asked() {
    let desk = setup().start();
    let region = [1800, 1000, 2100, 1200];
    let (_, response, bytes) = desk.screenshot(json!({"format": "png", "region": region}));
    assert_eq!(response["width"], 120);
    assert_eq!(response["height"], 80);
    assert_eq!(response["region"], json!(region));
    assert_eq!(response["meta"]["origin"], json!([1800, 1000]));
    let image = decode_png(&bytes);
    assert_eq!((image.width, image.height), (120, 80));
}

#[test]
fn a_screenshot_region_outside_the_monitor_is_not_supported() {
    let desk = setup().start();
    let (id, error) = desk.refused(
        "SCREENSHOT_REQUEST",
        json!({"format": "png", "region": [2000, 0, 2100, 100]}),
    );
    assert_unsupported(&error, "screenshot.region", None);
    let reason = error["details"]["reason"].as_str().unwrap();
    assert!(reason.contains("does not intersect monitor 0"), "{error}");
    assert_eq!(
        error["message"],
        format!("feature 'screenshot.region' is not supported on this backend: {reason}")
    );
    let record = desk.record(&id);
    assert_eq!(record["result"]["ok"], false);
    assert_eq!(record["result"]["error_code"], "FEATURE_NOT_SUPPORTED");
    assert_eq!(record["details"]["image_bytes_returned"], 0);
    assert!(record["details"].get("width").is_none(), "{record}");
    assert!(record["details"].get("height").is_none(), "{record}");
}

#[test]
fn a_screenshot_with_region_and_window_id_is_refused_as_mutually_exclusive() {
    let desk = setup().start();
    let (_, error) = desk.refused(
        "SCREENSHOT_REQUEST",
        json!({"region": [0, 0, 10, 10], "window_id": "win_x"}),
    );
    assert_unsupported(
        &error,
        "screenshot.region+window",
        Some("region and window_id are mutually exclusive"),
    );
}

#[test]
fn a_screenshot_of_a_window_is_not_supported() {
    let desk = setup().start();
    let w = desk.window("Shot", ("shot", "Shot"), RED, [100, 100, 300, 200]);
    let id = desk.id_of(&w);
    let (_, error) = desk.refused("SCREENSHOT_REQUEST", json!({"window_id": id}));
    assert_unsupported(&error, "screenshot.window", None);
}

#[test]
fn a_screenshot_of_a_monitor_out_of_range_uses_monitor_0() {
    let desk = setup()
        .options(
            XServerOptions::new()
                .window_manager()
                .two_monitors(Primary::Right),
        )
        .start();
    for asked in [json!(5), json!(-1), json!(2)] {
        let (_, response, _) = desk.screenshot(json!({"monitor": asked, "format": "png"}));
        assert_eq!(response["monitor"], 0, "monitor {asked}");
        assert_eq!(response["width"], 960);
        assert_eq!(response["logical_size"], json!([960, 1080]));
        assert_eq!(
            response["meta"],
            json!({"origin": [960, 0], "display_id": 0})
        );
    }
    let (_, response, _) = desk.screenshot(json!({"monitor": 1, "format": "png"}));
    assert_eq!(response["monitor"], 1);
    assert_eq!(response["meta"], json!({"origin": [0, 0], "display_id": 1}));
}

#[test]
fn a_screenshot_region_is_cut_to_the_chosen_monitor() {
    let desk = setup()
        .options(
            XServerOptions::new()
                .window_manager()
                .two_monitors(Primary::Right),
        )
        .start();
    // On the left monitor, which is monitor 1: not on monitor 0.
    let (_, error) = desk.refused(
        "SCREENSHOT_REQUEST",
        json!({"format": "png", "region": [100, 100, 200, 200]}),
    );
    assert_unsupported(&error, "screenshot.region", None);
    assert!(
        error["details"]["reason"]
            .as_str()
            .unwrap()
            .contains("does not intersect monitor 0"),
        "{error}"
    );
    let (_, response, _) = desk.screenshot(json!({
        "format": "png", "monitor": 1, "region": [900, 100, 1100, 200],
    }));
    assert_eq!(response["width"], 60);
    assert_eq!(response["height"], 100);
    assert_eq!(
        response["meta"],
        json!({"origin": [900, 100], "display_id": 1})
    );
}

#[test]
fn screenshot_quality_is_clamped_to_1_through_100() {
    let desk = setup().start();
    // Edges make the quality matter.
    let _w = desk.window(
        "Quality",
        ("quality", "Quality"),
        YELLOW,
        [100, 100, 200, 150],
    );
    let shot = |quality: i64| {
        let (_, response, bytes) = desk.screenshot(json!({
            "format": "jpeg", "quality": quality, "region": [0, 0, 400, 300],
            "include_cursor": false,
        }));
        assert_eq!(response["mime_type"], "image/jpeg");
        assert!(is_jpeg(&bytes));
        bytes
    };
    let best = shot(100);
    assert_eq!(shot(500), best);
    let worst = shot(1);
    assert_eq!(shot(0), worst);
    assert_eq!(shot(-5), worst);
    assert_ne!(best, worst);
}

#[test]
fn the_eleventh_screenshot_within_a_minute_is_refused_as_overloaded() {
    let desk = setup().start();
    let small = json!({"format": "png", "region": [0, 0, 8, 8]});
    for _ in 0..10 {
        desk.screenshot(small.clone());
    }
    let (id, error) = desk.refused("SCREENSHOT_REQUEST", small);
    assert_eq!(error["code"], "SHIM_OVERLOADED");
    assert_eq!(
        error["message"],
        "Screenshot rate limit exceeded (10/minute)."
    );
    let record = desk.record(&id);
    assert_eq!(record["op"], "SCREENSHOT_REQUEST");
    assert_eq!(record["result"]["error_code"], "SHIM_OVERLOADED");
    assert_eq!(record["details"]["image_bytes_returned"], 0);
}

#[test]
fn the_screenshot_rate_follows_max_screenshots_per_minute_and_counts_failed_captures() {
    let desk = setup()
        .env("AUTOGPT_SHIM_MAX_SCREENSHOTS_PER_MINUTE", "3")
        .start();
    let small = json!({"format": "png", "region": [0, 0, 8, 8]});
    desk.screenshot(small.clone());
    // Admitted, then refused for its region: it still counts.
    desk.refused(
        "SCREENSHOT_REQUEST",
        json!({"format": "png", "region": [5000, 0, 5001, 1]}),
    );
    desk.screenshot(small.clone());
    for _ in 0..2 {
        let (_, error) = desk.refused("SCREENSHOT_REQUEST", small.clone());
        assert_eq!(error["code"], "SHIM_OVERLOADED");
        assert_eq!(
            error["message"],
            "Screenshot rate limit exceeded (3/minute)."
        );
    }
}

#[test]
fn a_screenshot_larger_than_max_file_size_bytes_is_refused() {
    let desk = setup()
        .ack(HelloAck::new().grant(GRANT).max_file_size_bytes(2000))
        .start();
    let _w = desk.window("Big", ("big", "Big"), RED, [100, 100, 400, 300]);
    let (id, error) = desk.refused("SCREENSHOT_REQUEST", json!({"format": "png"}));
    assert_eq!(error["code"], "FILE_TOO_LARGE", "{error}");
    let message = error["message"].as_str().unwrap();
    let size: u64 = message
        .strip_prefix("Screenshot is ")
        .and_then(|rest| rest.strip_suffix(" bytes; limit is 2000 bytes."))
        .unwrap_or_else(|| panic!("{message}"))
        .parse()
        .unwrap();
    assert!(size > 2000, "{message}");
    assert_eq!(desk.record(&id)["result"]["error_code"], "FILE_TOO_LARGE");
    // A small one fits.
    desk.screenshot(json!({"format": "png", "region": [0, 0, 8, 8]}));
}

// --- sensitive windows (screenshot_mask) -------------------------------------

#[test]
fn a_password_manager_window_is_black_in_screenshots_beside_a_normal_window() {
    let desk = setup().start();
    let vault = desk.window(
        "Vault",
        ("keepassxc", "KeePassXC"),
        GREEN,
        [100, 100, 400, 300],
    );
    let notes = desk.window("Notes", ("notes", "Notes"), BLUE, [700, 100, 400, 300]);
    let (id, _, bytes) = desk.screenshot(json!({"format": "png", "include_cursor": false}));
    let image = decode_png(&bytes);
    image
        .uniform(in_image(vault.bounds(&desk.x), (0, 0), 0), BLACK)
        .unwrap();
    image
        .uniform(in_image(notes.bounds(&desk.x), (0, 0), 0), BLUE)
        .unwrap();
    assert_eq!(image.pixel(5, 1075), ROOT_COLOUR);
    assert_eq!(desk.record(&id)["details"]["masked_regions"], 1);
    // What the X server shows is untouched.
    let (cx, cy) = vault.centre(&desk.x);
    assert_eq!(desk.x.screen_pixel(cx, cy), GREEN);
}

#[test]
fn the_built_in_mask_covers_the_common_password_managers() {
    let desk = setup().start();
    let windows = [
        desk.window("One", ("bitwarden", "Bitwarden"), RED, [50, 100, 300, 200]),
        desk.window(
            "Two",
            ("1password", "1Password"),
            GREEN,
            [450, 100, 300, 200],
        ),
        desk.window(
            "Three",
            ("keepassxc", "KeePassXC"),
            BLUE,
            [850, 100, 300, 200],
        ),
    ];
    let (id, _, bytes) = desk.screenshot(json!({"format": "png", "include_cursor": false}));
    let image = decode_png(&bytes);
    for w in &windows {
        image
            .uniform(in_image(w.bounds(&desk.x), (0, 0), 0), BLACK)
            .unwrap_or_else(|e| panic!("{}: {e}", w.title()));
    }
    assert_eq!(desk.record(&id)["details"]["masked_regions"], 3);
}

#[test]
fn a_title_pattern_from_the_environment_masks_matching_windows() {
    let desk = setup()
        .env(
            "AUTOGPT_SHIM_SCREENSHOT_MASK",
            r#"["title:*bank*", "title:Doc?"]"#,
        )
        .start();
    let bank = desk.window(
        "My BANK account",
        ("browser", "Browser"),
        RED,
        [50, 100, 300, 200],
    );
    let doc = desk.window("doc1", ("editor", "Editor"), GREEN, [450, 100, 300, 200]);
    let longer = desk.window("Doc12", ("editor", "Editor"), BLUE, [850, 100, 300, 200]);
    let weather = desk.window(
        "Weather",
        ("browser", "Browser"),
        YELLOW,
        [50, 500, 300, 200],
    );
    let image = desk.picture();
    for (w, colour) in [
        (&bank, BLACK),
        (&doc, BLACK),
        (&longer, BLUE),
        (&weather, YELLOW),
    ] {
        image
            .uniform(in_image(w.bounds(&desk.x), (0, 0), 0), colour)
            .unwrap_or_else(|e| panic!("{}: {e}", w.title()));
    }
}

#[test]
fn a_class_entry_matches_the_class_or_the_instance_in_any_case() {
    let desk = setup()
        .env(
            "AUTOGPT_SHIM_SCREENSHOT_MASK",
            r#"["class:SECRETAPP", "class:vault"]"#,
        )
        .start();
    let by_instance = desk.window("A", ("secretapp", "Other"), RED, [50, 100, 300, 200]);
    let by_class = desk.window("B", ("other", "Vault"), GREEN, [450, 100, 300, 200]);
    let near_miss = desk.window("C", ("plain", "SecretAppX"), BLUE, [850, 100, 300, 200]);
    let image = desk.picture();
    for (w, colour) in [
        (&by_instance, BLACK),
        (&by_class, BLACK),
        (&near_miss, BLUE),
    ] {
        image
            .uniform(in_image(w.bounds(&desk.x), (0, 0), 0), colour)
            .unwrap_or_else(|e| panic!("{}: {e}", w.title()));
    }
}

#[test]
fn a_rect_entry_blackens_that_rectangle_and_no_more() {
    let desk = setup()
        .env(
            "AUTOGPT_SHIM_SCREENSHOT_MASK",
            r#"["rect:100,100,300,200"]"#,
        )
        .start();
    let (id, _, bytes) = desk.screenshot(json!({
        "format": "png", "region": [50, 50, 350, 250], "include_cursor": false,
    }));
    let image = decode_png(&bytes);
    // [100, 300) × [100, 200) on the screen is [50, 250) × [50, 150) here.
    image.uniform([50, 50, 200, 100], BLACK).unwrap();
    assert_eq!(image.pixel(49, 75), ROOT_COLOUR);
    assert_eq!(image.pixel(250, 75), ROOT_COLOUR);
    assert_eq!(image.pixel(75, 49), ROOT_COLOUR);
    assert_eq!(image.pixel(75, 150), ROOT_COLOUR);
    assert_eq!(desk.record(&id)["details"]["masked_regions"], 1);
}

#[test]
fn the_mask_list_can_be_set_in_the_config_file() {
    let desk = setup()
        .config("screenshot_mask = [\"class:notes\"]\n")
        .start();
    let notes = desk.window("Notes", ("notes", "Notes"), BLUE, [100, 100, 400, 300]);
    let vault = desk.window(
        "Vault",
        ("keepassxc", "KeePassXC"),
        GREEN,
        [700, 100, 400, 300],
    );
    let image = desk.picture();
    // Added to the built-in list, not replacing it.
    for w in [&notes, &vault] {
        image
            .uniform(in_image(w.bounds(&desk.x), (0, 0), 0), BLACK)
            .unwrap_or_else(|e| panic!("{}: {e}", w.title()));
    }
}

#[test]
fn only_the_visible_part_of_a_masked_window_is_black() {
    let desk = setup().start();
    let vault = desk.window(
        "Vault",
        ("keepassxc", "KeePassXC"),
        GREEN,
        [100, 100, 400, 300],
    );
    // Opened later, so on top, covering the vault's lower right part.
    let notes = desk.window("Notes", ("notes", "Notes"), BLUE, [350, 250, 400, 300]);
    let image = desk.picture();
    let v = vault.bounds(&desk.x);
    let n = notes.bounds(&desk.x);
    assert!(n[0] < v[2] && n[1] < v[3], "the windows do not overlap");
    image
        .uniform(in_image(n, (0, 0), 0), BLUE)
        .unwrap_or_else(|e| panic!("notes: {e}"));
    // The vault's part left of the notes window.
    image
        .uniform(
            [
                v[0] as u32,
                v[1] as u32,
                (n[0] - v[0] - 10) as u32,
                (v[3] - v[1]) as u32,
            ],
            BLACK,
        )
        .unwrap_or_else(|e| panic!("vault: {e}"));
}

#[test]
fn input_at_a_masked_window_is_refused_and_never_arrives() {
    let desk = setup().start();
    let vault = desk.window(
        "Vault",
        ("keepassxc", "KeePassXC"),
        GREEN,
        [100, 100, 400, 300],
    );
    let (cx, cy) = vault.centre(&desk.x);
    let pointer = desk.x.pointer();
    let mark = vault.mark();
    for action in [
        "left_click",
        "double_click",
        "mouse_move",
        "mouse_down",
        "scroll",
    ] {
        let (_, error) = desk.refused(
            "INPUT_ACTION",
            json!({"action": action, "coordinate": [cx, cy]}),
        );
        assert_eq!(error["code"], "FEATURE_NOT_SUPPORTED", "{action}: {error}");
        assert_eq!(
            error["details"]["reason"], "masked window",
            "{action}: {error}"
        );
    }
    assert_eq!(desk.x.pointer(), pointer);
    let marker = vault.sync(&desk.x);
    let events = &vault.events()[mark..marker];
    assert!(presses_in(events).is_empty(), "{events:?}");
}

#[test]
fn focusing_a_masked_window_is_refused() {
    let desk = setup().start();
    let vault = desk.window(
        "Vault",
        ("keepassxc", "KeePassXC"),
        GREEN,
        [100, 100, 400, 300],
    );
    let notes = desk.window("Notes", ("notes", "Notes"), BLUE, [700, 100, 400, 300]);
    assert_eq!(desk.x.active_window(), Some(notes.window_id()));
    let id = desk.id_of(&vault);
    let (_, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": id}));
    assert_eq!(error["code"], "FEATURE_NOT_SUPPORTED", "{error}");
    assert_eq!(error["details"]["reason"], "masked window", "{error}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(desk.x.active_window(), Some(notes.window_id()));
}

// --- INPUT_ACTION (§4.3, §4.6) -------------------------------------------------

/// The audit details of an `INPUT_ACTION`, all keys (§4.2).
fn input_details(action: &str, coordinate: Value) -> Value {
    json!({
        "action": action,
        "coordinate": coordinate,
        "key": null,
        "direction": null,
        "clicks": null,
        "text_length": null,
        "modifiers": null,
        "button": null,
        "paste": false,
    })
}

#[test]
fn mouse_move_puts_the_pointer_there() {
    let desk = setup().start();
    let id = desk.input(json!({"action": "mouse_move", "coordinate": [321, 456]}));
    assert_eq!(desk.x.pointer(), (321, 456));
    let record = desk.record(&id);
    assert_eq!(record["op"], "INPUT_ACTION");
    assert_eq!(record["result"]["ok"], true);
    assert_eq!(
        record["details"],
        input_details("mouse_move", json!([321, 456]))
    );
}

#[test]
fn left_click_presses_button_1_once_at_the_coordinate() {
    let desk = setup().start();
    let w = desk.window("Click", ("click", "Click"), RED, [200, 200, 400, 300]);
    let (x, y) = at(w.bounds(&desk.x), 37, 61);
    let id = desk.input(json!({"action": "left_click", "coordinate": [x, y]}));
    w.wait_click(1, (x, y), X_WAIT);
    let marker = w.sync(&desk.x);
    assert_eq!(presses_in(&w.events()[..marker]), [(1, x, y)]);
    assert_eq!(
        desk.record(&id)["details"],
        input_details("left_click", json!([x, y]))
    );
}

#[test]
fn the_click_actions_ignore_button_and_clicks() {
    let desk = setup().start();
    let w = desk.window("Click", ("click", "Click"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    let id = desk.input(json!({
        "action": "left_click", "coordinate": [x, y], "button": "right", "clicks": 3,
    }));
    w.wait_click(1, (x, y), X_WAIT);
    let marker = w.sync(&desk.x);
    assert_eq!(presses_in(&w.events()[..marker]), [(1, x, y)]);
    let details = &desk.record(&id)["details"];
    assert_eq!(details["button"], "right");
    assert_eq!(details["clicks"], 3);
}

#[test]
fn right_and_middle_click_use_buttons_3_and_2() {
    let desk = setup().start();
    let w = desk.window("Click", ("click", "Click"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    desk.input(json!({"action": "right_click", "coordinate": [x, y]}));
    desk.input(json!({"action": "middle_click", "coordinate": [x + 1, y]}));
    w.wait_presses(2, X_WAIT);
    let marker = w.sync(&desk.x);
    assert_eq!(
        presses_in(&w.events()[..marker]),
        [(3, x, y), (2, x + 1, y)]
    );
}

#[test]
fn double_click_clicks_twice_and_triple_click_three_times() {
    let desk = setup().start();
    let w = desk.window("Click", ("click", "Click"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    desk.input(json!({"action": "double_click", "coordinate": [x, y]}));
    w.wait_presses(2, X_WAIT);
    let marker = w.sync(&desk.x);
    assert_eq!(presses_in(&w.events()[..marker]), [(1, x, y); 2]);
    desk.input(json!({"action": "triple_click", "coordinate": [x, y]}));
    w.wait_presses(5, X_WAIT);
    let next = w.sync(&desk.x);
    assert_eq!(presses_in(&w.events()[marker..next]), [(1, x, y); 3]);
}

#[test]
fn click_modifiers_are_held_during_the_click_and_released_after() {
    let desk = setup().start();
    let w = desk.window("Click", ("click", "Click"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    let id = desk.input(json!({
        "action": "left_click", "coordinate": [x, y], "modifiers": ["ctrl", "shift"],
    }));
    desk.input(json!({"action": "left_click", "coordinate": [x, y]}));
    w.wait_presses(2, X_WAIT);
    let states: Vec<u32> = w
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Press { state, .. } => Some(*state),
            _ => None,
        })
        .collect();
    assert_eq!(states[0] & CTRL_SHIFT, CTRL_SHIFT, "{states:?}");
    assert_eq!(states[1] & CTRL_SHIFT, 0, "{states:?}");
    assert_eq!(
        desk.record(&id)["details"]["modifiers"],
        json!(["ctrl", "shift"])
    );
}

#[test]
fn mouse_down_and_mouse_up_press_and_release_where_asked() {
    let desk = setup().start();
    let w = desk.window("Hold", ("hold", "Hold"), RED, [200, 200, 400, 300]);
    let bounds = w.bounds(&desk.x);
    let p = at(bounds, 50, 50);
    let q = at(bounds, 200, 120);
    desk.input(json!({"action": "mouse_down", "coordinate": [p.0, p.1], "button": "right"}));
    assert!(eventually(X_WAIT, || w.presses() == [(3, p.0, p.1)]));
    assert!(
        !w.events()
            .iter()
            .any(|e| matches!(e, Event::Release { .. })),
        "released too early"
    );
    desk.input(json!({"action": "mouse_up", "coordinate": [q.0, q.1], "button": "right"}));
    let released = eventually(X_WAIT, || {
        w.events()
            .iter()
            .any(|e| matches!(e, Event::Release { button: 3, x, y, .. } if (*x, *y) == q))
    });
    assert!(released, "{:?}", w.events());
    assert_eq!(desk.x.pointer(), q);
    // The button defaults to the left one.
    desk.input(json!({"action": "mouse_down", "coordinate": [p.0, p.1]}));
    desk.input(json!({"action": "mouse_up", "coordinate": [p.0, p.1]}));
    w.wait_click(1, p, X_WAIT);
}

#[test]
fn drag_presses_at_the_first_point_follows_the_path_and_releases_at_the_last() {
    let desk = setup().start();
    let w = desk.window("Drag", ("drag", "Drag"), RED, [200, 200, 400, 300]);
    let b = w.bounds(&desk.x);
    let path: Vec<(i32, i32)> = (0..5).map(|n| at(b, 20 + 40 * n, 30 + 25 * n)).collect();
    let id = desk.input(json!({"action": "drag", "path": path}));
    let last = path[4];
    assert!(eventually(X_WAIT, || w.events().iter().any(
        |e| matches!(e, Event::Release { button: 1, x, y, .. } if (*x, *y) == last)
    )));
    let events = w.events();
    let press = events
        .iter()
        .position(|e| matches!(e, Event::Press { .. }))
        .unwrap();
    assert_eq!(presses_in(&events), [(1, path[0].0, path[0].1)]);
    // Every motion while the button was down is on the path (Tk may merge
    // motion events, so not every point need show).
    for event in &events[press..] {
        if let Event::Motion { x, y } = event {
            assert!(path.contains(&(*x, *y)), "({x}, {y}) is off the path");
        }
    }
    assert_eq!(desk.x.pointer(), last);
    assert_eq!(desk.record(&id)["details"]["action"], "drag");
}

#[test]
fn a_long_drag_path_moves_through_every_step_th_point() {
    let desk = setup().start();
    let w = desk.window("Drag", ("drag", "Drag"), RED, [100, 100, 800, 600]);
    let b = w.bounds(&desk.x);
    // 250 points: step ⌊250/100⌋ = 2, so path[1], path[3], …, path[249].
    let path: Vec<(i32, i32)> = (0..250).map(|n| at(b, 10 + 2 * n, 300)).collect();
    desk.input(json!({"action": "drag", "path": path}));
    let last = path[249];
    assert!(eventually(X_WAIT, || w.events().iter().any(
        |e| matches!(e, Event::Release { x, y, .. } if (*x, *y) == last)
    )));
    let events = w.events();
    let press = events
        .iter()
        .position(|e| matches!(e, Event::Press { .. }))
        .unwrap();
    let mut moved = 0;
    for event in &events[press..] {
        if let Event::Motion { x, y } = event {
            let index = path.iter().position(|p| *p == (*x, *y));
            assert!(
                index.is_some_and(|i| i % 2 == 1),
                "({x}, {y}) is not an odd point of the path"
            );
            moved += 1;
        }
    }
    assert!(moved > 0, "no motion while dragging: {events:?}");
}

#[test]
fn drag_without_a_path_is_an_unknown_action() {
    let desk = setup().start();
    for path in [json!([]), Value::Null] {
        let (_, error) = desk.refused("INPUT_ACTION", json!({"action": "drag", "path": path}));
        assert_unsupported(&error, "drag", Some("unknown action 'drag'"));
    }
}

#[test]
fn scroll_presses_wheel_buttons_4_to_7_once_per_unit() {
    let desk = setup().start();
    let w = desk.window("Wheel", ("wheel", "Wheel"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    for (direction, amount) in [("up", 2), ("down", 3), ("left", 1), ("right", 4)] {
        desk.input(json!({
            "action": "scroll", "coordinate": [x, y],
            "scroll_direction": direction, "scroll_amount": amount,
        }));
    }
    w.wait_presses(10, X_WAIT);
    let marker = w.sync(&desk.x);
    let buttons: Vec<u8> = presses_in(&w.events()[..marker])
        .iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(buttons, [4, 4, 5, 5, 5, 6, 7, 7, 7, 7]);
    assert!(presses_in(&w.events()).iter().all(|p| (p.1, p.2) == (x, y)));
}

#[test]
fn scroll_amount_falls_back_to_clicks_then_3_and_direction_to_direction_then_down() {
    let desk = setup().start();
    let w = desk.window("Wheel", ("wheel", "Wheel"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    let cases = [
        (json!({"clicks": 2, "direction": "up"}), vec![4, 4]),
        (json!({}), vec![5, 5, 5]),
        (json!({"clicks": 0}), vec![5, 5, 5]),
        (
            json!({"scroll_amount": 1, "clicks": 5, "scroll_direction": "left", "direction": "up"}),
            vec![6],
        ),
    ];
    for (fields, expected) in cases {
        let mut payload = json!({"action": "scroll", "coordinate": [x, y]});
        payload
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        let mark = w.mark();
        desk.input(payload.clone());
        let marker = w.sync(&desk.x);
        let buttons: Vec<u8> = presses_in(&w.events()[mark..marker])
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(buttons, expected, "{payload}");
    }
}

#[test]
fn scroll_without_a_coordinate_scrolls_where_the_pointer_is_and_holds_the_modifiers() {
    let desk = setup().start();
    let w = desk.window("Wheel", ("wheel", "Wheel"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    desk.x.move_pointer(x, y);
    desk.input(json!({
        "action": "scroll", "scroll_direction": "down", "scroll_amount": 1, "modifiers": ["ctrl"],
    }));
    w.wait_presses(1, X_WAIT);
    let press = w
        .events()
        .into_iter()
        .find(|e| matches!(e, Event::Press { .. }))
        .unwrap();
    match press {
        Event::Press {
            button,
            x: px,
            y: py,
            state,
        } => {
            assert_eq!((button, px, py), (5, x, y));
            assert_eq!(state & CONTROL_MASK, CONTROL_MASK);
        }
        _ => unreachable!(),
    }
}

#[test]
fn type_sends_exactly_the_unicode_text_and_audits_only_its_length() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let text = "Hello, wörld ✓ 日本";
    let id = desk.input(json!({"action": "type", "text": text}));
    w.wait_typed(text, X_WAIT);
    let marker = w.sync(&desk.x);
    assert_eq!(typed_text(&w.events()[..marker]), text);
    let details = &desk.record(&id)["details"];
    assert_eq!(details["action"], "type");
    assert_eq!(details["text_length"], 17);
    assert_eq!(
        keys(details),
        sorted(&[
            "action",
            "coordinate",
            "key",
            "direction",
            "clicks",
            "text_length",
            "modifiers",
            "button",
            "paste",
        ])
    );
    for part in [text, "Hello", "wörld", "日本"] {
        desk.assert_never_logged(part);
    }
}

#[test]
fn type_turns_newlines_into_return_and_tabs_into_tab() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    desk.input(json!({"action": "type", "text": "a\tb\nc\rd"}));
    w.wait_typed("a\tb\nc\nd", X_WAIT);
    let keysyms: Vec<String> = keys_in(&w.events()).into_iter().map(|k| k.0).collect();
    assert_eq!(keysyms, ["a", "Tab", "b", "Return", "c", "Return", "d"]);
}

#[test]
fn type_of_empty_text_types_nothing_and_without_text_is_an_unknown_action() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let mark = w.mark();
    let id = desk.input(json!({"action": "type", "text": ""}));
    assert_eq!(desk.record(&id)["details"]["text_length"], 0);
    let (_, error) = desk.refused("INPUT_ACTION", json!({"action": "type"}));
    assert_unsupported(&error, "type", Some("unknown action 'type'"));
    let marker = w.sync(&desk.x);
    assert!(keys_in(&w.events()[mark..marker]).is_empty());
}

#[test]
fn key_presses_the_chord_in_order_and_releases_it() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let mark = w.mark();
    let id = desk.input(json!({"action": "key", "key": " Ctrl + Shift + A "}));
    desk.input(json!({"action": "type", "text": "b"}));
    w.wait_typed("b", X_WAIT);
    let keys = keys_in(&w.events_since(mark));
    let names: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
    assert_eq!(names, ["Control_L", "Shift_L", "A", "b"], "{keys:?}");
    assert_eq!(keys[2].1 & CTRL_SHIFT, CTRL_SHIFT);
    assert_eq!(keys[3].1 & CTRL_SHIFT, 0, "the chord stayed pressed");
    assert_eq!(desk.record(&id)["details"]["key"], " Ctrl + Shift + A ");
}

#[test]
fn key_names_map_to_their_keysyms() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let cases = [
        ("enter", "Return"),
        ("RETURN", "Return"),
        ("tab", "Tab"),
        ("esc", "Escape"),
        ("escape", "Escape"),
        ("space", "space"),
        ("backspace", "BackSpace"),
        ("delete", "Delete"),
        ("del", "Delete"),
        ("insert", "Insert"),
        ("home", "Home"),
        ("end", "End"),
        ("pageup", "Prior"),
        ("pgup", "Prior"),
        ("pagedown", "Next"),
        ("pgdn", "Next"),
        ("up", "Up"),
        ("down", "Down"),
        ("left", "Left"),
        ("right", "Right"),
        ("f1", "F1"),
        ("F12", "F12"),
        ("f24", "F24"),
        ("printscreen", "Print"),
        ("x", "x"),
        ("?", "question"),
        ("é", "eacute"),
    ];
    for (name, keysym) in cases {
        let mark = w.mark();
        desk.input(json!({"action": "key", "key": name}));
        let marker = w.sync(&desk.x);
        let keys: Vec<String> = keys_in(&w.events()[mark..marker])
            .into_iter()
            .map(|k| k.0)
            .filter(|k| !k.starts_with("Shift"))
            .collect();
        assert_eq!(keys, [keysym], "key {name:?}");
    }
}

#[test]
fn modifier_key_names_press_the_left_modifiers() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let cases = [
        ("shift", "Shift_L"),
        ("ctrl", "Control_L"),
        ("control", "Control_L"),
        ("alt", "Alt_L"),
        ("super", "Super_L"),
        ("win", "Super_L"),
        ("cmd", "Super_L"),
    ];
    for (name, keysym) in cases {
        let mark = w.mark();
        desk.input(json!({"action": "key", "key": name}));
        let marker = w.sync(&desk.x);
        let keys: Vec<String> = keys_in(&w.events()[mark..marker])
            .into_iter()
            .map(|k| k.0)
            .collect();
        assert_eq!(keys, [keysym], "key {name:?}");
    }
}

#[test]
fn an_unknown_key_is_refused_before_anything_is_pressed() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let mark = w.mark();
    for action in ["key", "hold_key"] {
        let (id, error) = desk.refused(
            "INPUT_ACTION",
            json!({"action": action, "key": "ctrl+foo", "duration_ms": 100}),
        );
        assert_error(
            &error,
            "FEATURE_NOT_SUPPORTED",
            "feature 'input.key' is not supported on this backend: unknown key 'foo'",
            json!({"feature": "input.key", "reason": "unknown key 'foo'"}),
        );
        assert_eq!(
            desk.record(&id)["result"]["error_code"],
            "FEATURE_NOT_SUPPORTED"
        );
    }
    let marker = w.sync(&desk.x);
    let keys = keys_in(&w.events()[mark..marker]);
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn hold_key_holds_the_chord_for_duration_ms() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    w.activate(&desk.x);
    let started = Instant::now();
    desk.input(json!({"action": "hold_key", "key": "shift", "duration_ms": 400}));
    assert!(started.elapsed() >= Duration::from_millis(400));
    desk.input(json!({"action": "type", "text": "a"}));
    // Released afterwards: a lower-case letter.
    w.wait_typed("a", X_WAIT);
    assert_eq!(keys_in(&w.events())[0].0, "Shift_L");
}

#[test]
fn a_coordinate_outside_every_display_is_refused_with_the_display_rects() {
    let desk = setup().start();
    let before = desk.x.pointer();
    for (x, y) in [(1920, 500), (-1, 0), (0, 1080)] {
        let (id, error) = desk.refused(
            "INPUT_ACTION",
            json!({"action": "left_click", "coordinate": [x, y]}),
        );
        assert_error(
            &error,
            "INPUT_OUT_OF_BOUNDS",
            &format!("coordinate ({x}, {y}) is outside the union of connected display bounds"),
            json!({
                "requested_coordinate": [x, y],
                "displays": [{"index": 0, "origin": [0, 0], "size": [1920, 1080]}],
            }),
        );
        assert_eq!(
            desk.record(&id)["result"]["error_code"],
            "INPUT_OUT_OF_BOUNDS"
        );
    }
    assert_eq!(desk.x.pointer(), before);
    desk.input(json!({"action": "mouse_move", "coordinate": [1919, 1079]}));
    assert_eq!(desk.x.pointer(), (1919, 1079));
}

#[test]
fn the_bounds_are_the_union_of_the_monitors_with_half_open_edges() {
    let desk = setup()
        .options(
            XServerOptions::new()
                .window_manager()
                .monitors(&[[0, 0, 960, 1080], [960, 0, 960, 540]], 0),
        )
        .start();
    // On the root, but on no monitor.
    let (_, error) = desk.refused(
        "INPUT_ACTION",
        json!({"action": "mouse_move", "coordinate": [1500, 800]}),
    );
    assert_eq!(error["code"], "INPUT_OUT_OF_BOUNDS");
    assert_eq!(
        error["details"]["displays"],
        json!([
            {"index": 0, "origin": [0, 0], "size": [960, 1080]},
            {"index": 1, "origin": [960, 0], "size": [960, 540]},
        ])
    );
    let (_, error) = desk.refused(
        "INPUT_ACTION",
        json!({"action": "mouse_move", "coordinate": [960, 540]}),
    );
    assert_eq!(error["code"], "INPUT_OUT_OF_BOUNDS");
    for (x, y) in [(960, 539), (959, 1079), (1919, 0)] {
        desk.input(json!({"action": "mouse_move", "coordinate": [x, y]}));
        assert_eq!(desk.x.pointer(), (x, y));
    }
}

#[test]
fn every_drag_point_is_checked_before_anything_is_pressed() {
    let desk = setup().start();
    let w = desk.window("Drag", ("drag", "Drag"), RED, [200, 200, 400, 300]);
    let (x, y) = w.centre(&desk.x);
    let mark = w.mark();
    let (_, error) = desk.refused(
        "INPUT_ACTION",
        json!({"action": "drag", "path": [[x, y], [x + 10, y], [5000, 5]]}),
    );
    assert_eq!(error["code"], "INPUT_OUT_OF_BOUNDS");
    assert_eq!(error["details"]["requested_coordinate"], json!([5000, 5]));
    let marker = w.sync(&desk.x);
    assert!(presses_in(&w.events()[mark..marker]).is_empty());
}

#[test]
fn a_click_without_a_coordinate_is_refused() {
    let desk = setup().start();
    // The four clicks of CAPABILITIES.md §4.6's click row; a triple click is
    // a row of its own whose missing field is an unknown action.
    for action in ["left_click", "right_click", "middle_click", "double_click"] {
        let (id, error) = desk.refused("INPUT_ACTION", json!({"action": action}));
        assert_eq!(error["code"], "FEATURE_NOT_SUPPORTED", "{action}: {error}");
        assert_eq!(
            error["details"]["reason"], "coordinate is required",
            "{action}"
        );
        let feature = error["details"]["feature"].as_str().unwrap();
        assert_unsupported(&error, feature, Some("coordinate is required"));
        assert_eq!(desk.record(&id)["details"]["coordinate"], Value::Null);
    }
}

#[test]
fn actions_missing_their_field_are_refused_as_unknown_actions() {
    let desk = setup().start();
    for action in [
        "mouse_move",
        "triple_click",
        "mouse_down",
        "mouse_up",
        "key",
        "hold_key",
    ] {
        let (_, error) = desk.refused("INPUT_ACTION", json!({"action": action}));
        assert_unsupported(&error, action, Some(&format!("unknown action '{action}'")));
    }
}

#[test]
fn wait_sleeps_for_duration_ms_without_any_bounds_check() {
    let desk = setup().start();
    let started = Instant::now();
    let id = desk.input(json!({
        "action": "wait", "duration_ms": 300, "coordinate": [99999, 99999],
    }));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        desk.record(&id)["details"]["coordinate"],
        json!([99999, 99999])
    );
    let started = Instant::now();
    desk.input(json!({"action": "wait", "duration_ms": -500}));
    desk.input(json!({"action": "wait"}));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn wait_is_clamped_to_5_seconds() {
    let desk = setup().start();
    let started = Instant::now();
    desk.input(json!({"action": "wait", "duration_ms": 60000}));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(4900) && waited < Duration::from_secs(12),
        "{waited:?}"
    );
}

// --- CURSOR_POSITION (§4.7) -------------------------------------------------

#[test]
fn cursor_position_reports_where_the_pointer_is() {
    let desk = setup().start();
    desk.input(json!({"action": "mouse_move", "coordinate": [700, 800]}));
    let (id, position) = desk.ok("CURSOR_POSITION_REQUEST", json!({}));
    assert_eq!(position, json!({"x": 700, "y": 800, "monitor": 0}));
    assert_eq!(desk.record(&id)["details"], json!({}));
    // Moved by someone else.
    desk.x.move_pointer(12, 34);
    let (_, position) = desk.ok("CURSOR_POSITION_REQUEST", json!({}));
    assert_eq!(position, json!({"x": 12, "y": 34, "monitor": 0}));
}

#[test]
fn cursor_position_names_the_monitor_under_the_pointer() {
    let desk = setup()
        .options(
            XServerOptions::new()
                .window_manager()
                .two_monitors(Primary::Right),
        )
        .start();
    for ((x, y), monitor) in [
        ((100, 100), 1),
        ((960, 5), 0),
        ((959, 5), 1),
        ((1919, 1079), 0),
    ] {
        desk.x.move_pointer(x, y);
        let (_, position) = desk.ok("CURSOR_POSITION_REQUEST", json!({}));
        assert_eq!(position, json!({"x": x, "y": y, "monitor": monitor}));
    }
}

#[test]
fn cursor_position_off_every_monitor_reports_monitor_0() {
    let desk = setup()
        .options(XServerOptions::new().monitors(&[[0, 0, 960, 1080], [960, 0, 960, 540]], 1))
        .start();
    desk.x.move_pointer(1500, 800);
    let (_, position) = desk.ok("CURSOR_POSITION_REQUEST", json!({}));
    assert_eq!(position, json!({"x": 1500, "y": 800, "monitor": 0}));
}

// --- WINDOW_LIST / WINDOW_FOCUS (§4.8) -----------------------------------------

#[test]
fn window_list_reports_each_client_window() {
    let desk = setup().start();
    let a = desk.window(
        "Notes ✓ 日本",
        ("notes", "Notes"),
        RED,
        [100, 100, 400, 300],
    );
    let b = desk.window("Terminal", ("xterm", "XTerm"), BLUE, [700, 200, 500, 250]);
    let (id, list) = desk.ok("WINDOW_LIST_REQUEST", json!({}));
    assert_eq!(list["truncated"], false);
    let windows = list["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 2, "{list}");
    for (w, class) in [(&a, "Notes"), (&b, "XTerm")] {
        let entry = entry_of(windows, w);
        assert!(is_minted(entry["window_id"].as_str().unwrap()), "{entry}");
        assert_eq!(entry["title"], w.title());
        assert_eq!(entry["app_name"], class);
        assert_eq!(entry["app_bundle_id"], Value::Null);
        assert_eq!(entry["bounds"], json!(w.bounds(&desk.x)));
        assert_eq!(entry["monitor"], 0);
        assert_eq!(entry["is_minimized"], false);
        assert_eq!(entry["is_fullscreen"], false);
    }
    assert_ne!(windows[0]["window_id"], windows[1]["window_id"]);
    assert_eq!(
        desk.record(&id)["details"],
        json!({
            "app_bundle_id": null,
            "include_minimized": false,
            "include_offscreen": false,
            "windows_returned": 2,
        })
    );
}

#[test]
fn window_ids_are_minted_afresh_at_every_list() {
    let desk = setup().start();
    let a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let first = desk.id_of(&a);
    let second = desk.id_of(&a);
    assert!(is_minted(&first) && is_minted(&second));
    assert_ne!(first, second);
}

#[test]
fn window_focus_activates_the_window() {
    let desk = setup().start();
    let a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let b = desk.window("B", ("b", "B"), BLUE, [600, 100, 300, 200]);
    assert_eq!(desk.x.active_window(), Some(b.window_id()));
    let id = desk.id_of(&a);
    let (request, ack) = desk.ok("WINDOW_FOCUS", json!({"window_id": id}));
    assert_eq!(ack, json!({"ok": true}));
    assert!(eventually(X_WAIT, || desk.x.active_window() == Some(a.window_id())));
    assert_eq!(
        desk.record(&request)["details"],
        json!({"window_id": id, "raise": true})
    );
}

fn assert_stale(error: &Value, id: &str, message: &str) {
    assert_error(
        error,
        "WINDOW_STALE",
        message,
        json!({"window_id": id, "hint": "re-list windows"}),
    );
}

#[test]
fn window_focus_with_an_id_from_an_older_list_is_stale() {
    let desk = setup().start();
    let a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let old = desk.id_of(&a);
    desk.windows();
    let (_, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": old}));
    assert_stale(&error, &old, &format!("unknown window_id '{old}'"));
}

#[test]
fn window_focus_with_an_unknown_id_is_stale() {
    let desk = setup().start();
    let id = "win_00000000-0000-4000-8000-000000000000";
    let (request, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": id}));
    assert_stale(&error, id, &format!("unknown window_id '{id}'"));
    assert_eq!(
        desk.record(&request)["result"]["error_code"],
        "WINDOW_STALE"
    );
}

#[test]
fn window_focus_of_a_closed_window_is_stale_and_then_unknown() {
    let desk = setup().start();
    let _a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let mut b = desk.window("B", ("b", "B"), BLUE, [600, 100, 300, 200]);
    let id = desk.id_of(&b);
    b.close(&desk.x);
    let (_, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": id}));
    assert_stale(
        &error,
        &id,
        &format!("window_id {id} no longer maps to a live window"),
    );
    // The entry was dropped.
    let (_, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": id}));
    assert_stale(&error, &id, &format!("unknown window_id '{id}'"));
}

#[test]
fn window_ids_do_not_survive_a_reconnect() {
    let mut desk = setup().start();
    let a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let id = desk.id_of(&a);
    desk.conn.close(1001, "going away").unwrap();
    desk.conn.wait_closed(WAIT).unwrap();
    let (conn, _) = handshake(&mut desk.shim, &desk.emulator, HelloAck::new().grant(GRANT));
    desk.conn = conn;
    let (_, error) = desk.refused("WINDOW_FOCUS", json!({"window_id": id}));
    assert_stale(&error, &id, &format!("unknown window_id '{id}'"));
}

#[test]
fn window_operations_need_a_window_manager() {
    let desk = setup().options(XServerOptions::new()).start();
    let _a = desk.window("A", ("a", "A"), RED, [100, 100, 300, 200]);
    let (_, error) = desk.refused("WINDOW_LIST_REQUEST", json!({}));
    assert_unsupported(&error, "window.list", None);
    let (_, error) = desk.refused(
        "WINDOW_FOCUS",
        json!({"window_id": "win_00000000-0000-4000-8000-000000000000"}),
    );
    assert_unsupported(&error, "window.focus", None);
}

// --- APP_LIST / APP_LAUNCH (§4.9) ----------------------------------------------

#[test]
fn app_list_holds_every_process_in_pid_order_with_the_test_window() {
    let desk = setup().start();
    let w = desk.window("App", ("app", "App"), RED, [100, 100, 300, 200]);
    let (id, list) = desk.ok("APP_LIST_REQUEST", json!({}));
    let apps = list["apps"].as_array().unwrap();
    let pids: Vec<u64> = apps.iter().map(|a| a["pid"].as_u64().unwrap()).collect();
    assert!(pids.windows(2).all(|p| p[0] < p[1]), "not in pid order");
    let entry = apps
        .iter()
        .find(|a| a["pid"] == w.pid())
        .unwrap_or_else(|| panic!("the test window's process is not listed"));
    assert_eq!(entry["name"], "python3");
    assert_eq!(entry["bundle_id"], Value::Null);
    let exe = std::fs::read_link(format!("/proc/{}/exe", w.pid())).unwrap();
    assert_eq!(entry["executable_path"], exe.to_str().unwrap());
    assert!(entry["is_frontmost"].is_boolean());
    assert!(entry["window_count"].is_u64());
    assert!(apps.iter().any(|a| a["pid"] == desk.shim.pid()));
    assert_eq!(
        desk.record(&id)["details"],
        json!({"include_background": false, "apps_returned": apps.len()})
    );
}

#[test]
fn app_launch_starts_the_program_in_its_own_session_in_home_with_null_stdio() {
    let desk = setup().start();
    let out = desk.x.dir().join("launched");
    let script = format!(
        "fds=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); \
         {{ echo $$; pwd -P; echo \"$DISPLAY\"; echo \"$fds\"; \
         cut -d' ' -f6 /proc/$$/stat; }} > {}.tmp && mv {0}.tmp {0}",
        out.display()
    );
    let (id, ack) = desk.ok(
        "APP_LAUNCH",
        json!({"executable_path": "/bin/sh", "args": ["-c", script]}),
    );
    assert_eq!(ack, json!({"ok": true}));
    assert!(
        eventually(X_WAIT, || out.exists()),
        "the program did not run"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let pid: u64 = lines[0].parse().unwrap();
    assert_eq!(
        lines[1],
        desk.home.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(lines[2], desk.x.display());
    assert_eq!(lines[3..6], ["/dev/null", "/dev/null", "/dev/null"]);
    assert_eq!(lines[6], lines[0], "not the leader of a new session");
    assert_eq!(
        desk.record(&id)["details"],
        json!({
            "bundle_id": null,
            "executable_path": "/bin/sh",
            "args_count": 2,
            "activate": true,
            "pid": pid,
        })
    );
}

#[test]
fn app_launch_without_executable_path_is_not_supported() {
    let desk = setup().start();
    let (_, error) = desk.refused("APP_LAUNCH", json!({"bundle_id": "org.example.App"}));
    assert_unsupported(
        &error,
        "app.launch",
        Some("executable_path is required on Linux"),
    );
}

#[test]
fn app_launch_of_a_missing_program_is_an_internal_error_without_a_pid() {
    let desk = setup().start();
    let (id, error) = desk.refused(
        "APP_LAUNCH",
        json!({"executable_path": "/nonexistent/program"}),
    );
    assert_eq!(error["code"], "INTERNAL_ERROR");
    let details = &desk.record(&id)["details"];
    assert_eq!(details["executable_path"], "/nonexistent/program");
    assert!(details.get("pid").is_none(), "{details}");
}

// --- CLIPBOARD (§4.10) -------------------------------------------------------------

#[test]
fn clipboard_operations_need_enable_clipboard() {
    let desk = setup().start();
    desk.x.set_clipboard("untouched");
    let (_, error) = desk.refused("CLIPBOARD_READ", json!({"format": "text"}));
    assert_unsupported(&error, "clipboard.read", Some("--enable-clipboard not set"));
    let (_, error) = desk.refused(
        "CLIPBOARD_WRITE",
        json!({"format": "text", "content": "new"}),
    );
    assert_unsupported(
        &error,
        "clipboard.write",
        Some("--enable-clipboard not set"),
    );
    assert_eq!(desk.x.clipboard().as_deref(), Some("untouched"));
}

const CLIPPED: &str = "clipboard ✓ ünïcode 日本";

#[test]
fn clipboard_write_puts_the_text_on_the_x_clipboard() {
    let desk = setup().flag("--enable-clipboard").start();
    let (id, ack) = desk.ok(
        "CLIPBOARD_WRITE",
        json!({"format": "text", "content": CLIPPED}),
    );
    assert_eq!(ack, json!({"ok": true}));
    assert_eq!(desk.x.clipboard().as_deref(), Some(CLIPPED));
    assert_eq!(
        desk.record(&id)["details"],
        json!({"format": "text", "size_bytes": CLIPPED.len()})
    );
}

#[test]
fn clipboard_read_returns_the_shims_own_write() {
    let desk = setup().flag("--enable-clipboard").start();
    desk.ok(
        "CLIPBOARD_WRITE",
        json!({"format": "text", "content": CLIPPED}),
    );
    let (id, read) = desk.ok("CLIPBOARD_READ", json!({}));
    assert_eq!(
        read,
        json!({"format": "text", "content": CLIPPED, "size_bytes": CLIPPED.len()})
    );
    assert_eq!(
        desk.record(&id)["details"],
        json!({"format": "text", "size_bytes": CLIPPED.len()})
    );
    desk.assert_never_logged(CLIPPED);
    desk.assert_never_logged("ünïcode");
}

#[test]
fn clipboard_read_after_another_client_wrote_is_concealed_as_overwritten() {
    let desk = setup().flag("--enable-clipboard").start();
    desk.ok(
        "CLIPBOARD_WRITE",
        json!({"format": "text", "content": CLIPPED}),
    );
    desk.x.set_clipboard("foreign secret");
    let (id, error) = desk.refused("CLIPBOARD_READ", json!({"format": "text"}));
    assert_error(
        &error,
        "CLIPBOARD_CONCEALED",
        "clipboard contents not readable: writeback_overwritten",
        json!({"reason": "writeback_overwritten"}),
    );
    assert_eq!(
        desk.record(&id)["result"]["error_code"],
        "CLIPBOARD_CONCEALED"
    );
    desk.assert_never_logged("foreign secret");
}

#[test]
fn clipboard_read_without_an_own_write_is_concealed_as_writeback_only() {
    let desk = setup().flag("--enable-clipboard").start();
    desk.x.set_clipboard("foreign secret");
    let (_, error) = desk.refused("CLIPBOARD_READ", json!({"format": "text"}));
    assert_error(
        &error,
        "CLIPBOARD_CONCEALED",
        "clipboard contents not readable: writeback_only",
        json!({"reason": "writeback_only"}),
    );
}

#[test]
fn clipboard_read_foreign_returns_whatever_is_on_the_clipboard() {
    let desk = setup()
        .flag("--enable-clipboard")
        .flag("--enable-clipboard-read-foreign")
        .start();
    let (_, read) = desk.ok("CLIPBOARD_READ", json!({}));
    assert_eq!(
        read,
        json!({"format": "text", "content": "", "size_bytes": 0})
    );
    desk.x.set_clipboard("foreign ✓");
    let (_, read) = desk.ok("CLIPBOARD_READ", json!({}));
    assert_eq!(
        read,
        json!({"format": "text", "content": "foreign ✓", "size_bytes": "foreign ✓".len()})
    );
}

#[test]
fn clipboard_write_larger_than_max_file_size_bytes_is_refused_without_touching_it() {
    let desk = setup()
        .flag("--enable-clipboard")
        .ack(HelloAck::new().grant(GRANT).max_file_size_bytes(2000))
        .start();
    desk.x.set_clipboard("before");
    // 1001 chars, 2002 bytes: measured in UTF-8 bytes.
    let content = "é".repeat(1001);
    let (_, error) = desk.refused(
        "CLIPBOARD_WRITE",
        json!({"format": "text", "content": content}),
    );
    assert_eq!(error["code"], "FILE_TOO_LARGE");
    assert_eq!(
        error["message"],
        "Clipboard content is 2002 bytes; limit is 2000 bytes."
    );
    assert_eq!(desk.x.clipboard().as_deref(), Some("before"));
}

#[test]
fn clipboard_read_larger_than_max_file_size_bytes_is_refused() {
    let desk = setup()
        .flag("--enable-clipboard")
        .flag("--enable-clipboard-read-foreign")
        .ack(HelloAck::new().grant(GRANT).max_file_size_bytes(2000))
        .start();
    desk.x.set_clipboard(&"x".repeat(3000));
    let (_, error) = desk.refused("CLIPBOARD_READ", json!({}));
    assert_eq!(error["code"], "FILE_TOO_LARGE");
    assert_eq!(
        error["message"],
        "Clipboard content is 3000 bytes; limit is 2000 bytes."
    );
}

#[test]
fn clipboard_images_are_not_supported() {
    let desk = setup().flag("--enable-clipboard").start();
    let (_, error) = desk.refused("CLIPBOARD_READ", json!({"format": "image"}));
    assert_unsupported(
        &error,
        "clipboard.read",
        Some("format 'image' not supported"),
    );
    let (_, error) = desk.refused(
        "CLIPBOARD_WRITE",
        json!({"format": "image", "content": "iVBORw0KGgo="}),
    );
    assert_unsupported(
        &error,
        "clipboard.write",
        Some("format 'image' not supported"),
    );
}

/// 250 chars of text that is not all ASCII.
fn long_text() -> String {
    let mut text = String::new();
    while text.chars().count() < 250 {
        text.push_str("pasted ✓ ");
    }
    text.chars().take(250).collect()
}

#[test]
fn type_with_paste_pastes_long_text_and_restores_the_clipboard() {
    let desk = setup().flag("--enable-clipboard").start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    desk.x.set_clipboard("previous ✓");
    w.activate(&desk.x);
    let text = long_text();
    let id = desk.input(json!({
        "action": "type", "text": text, "paste": true, "preserve_clipboard": true,
    }));
    w.wait_typed(&text, X_WAIT);
    assert!(
        w.events().iter().any(|e| matches!(e, Event::Paste { .. })),
        "typed, not pasted"
    );
    assert!(eventually(X_WAIT, || desk.x.clipboard().as_deref()
        == Some("previous ✓")));
    let details = &desk.record(&id)["details"];
    assert_eq!(details["paste"], true);
    assert_eq!(details["text_length"], 250);
    desk.assert_never_logged(&text);
}

#[test]
fn type_with_paste_leaves_the_text_on_the_clipboard_without_preserve_clipboard() {
    let desk = setup().flag("--enable-clipboard").start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    desk.x.set_clipboard("previous");
    w.activate(&desk.x);
    let text = long_text();
    desk.input(json!({"action": "type", "text": text, "paste": true}));
    w.wait_typed(&text, X_WAIT);
    assert_eq!(desk.x.clipboard(), Some(text));
}

#[test]
fn type_with_paste_types_text_shorter_than_200_chars() {
    let desk = setup().flag("--enable-clipboard").start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    desk.x.set_clipboard("previous");
    w.activate(&desk.x);
    let text: String = long_text().chars().take(199).collect();
    desk.input(json!({"action": "type", "text": text, "paste": true}));
    w.wait_typed(&text, X_WAIT);
    assert!(!w.events().iter().any(|e| matches!(e, Event::Paste { .. })));
    assert_eq!(desk.x.clipboard().as_deref(), Some("previous"));
}

#[test]
fn type_with_paste_types_when_the_clipboard_is_off() {
    let desk = setup().start();
    let w = desk.window("Editor", ("editor", "Editor"), RED, [200, 200, 400, 300]);
    desk.x.set_clipboard("previous");
    w.activate(&desk.x);
    let text: String = long_text().chars().take(200).collect();
    desk.input(json!({"action": "type", "text": text, "paste": true}));
    w.wait_typed(&text, X_WAIT);
    assert!(!w.events().iter().any(|e| matches!(e, Event::Paste { .. })));
    assert_eq!(desk.x.clipboard().as_deref(), Some("previous"));
}

// --- PERMISSIONS_CHECK (§4.11) ----------------------------------------------------

#[test]
fn permissions_check_grants_the_x11_permissions_and_others_are_not_applicable() {
    let desk = setup().start();
    let asked = json!([
        "screen_recording",
        "accessibility",
        "input_monitoring",
        "microphone",
        "accessibility",
    ]);
    let (id, response) = desk.ok("PERMISSIONS_CHECK_REQUEST", json!({"permissions": asked}));
    assert_eq!(
        response,
        json!({"permissions": {
            "screen_recording": "granted",
            "accessibility": "granted",
            "input_monitoring": "granted",
            "microphone": "not_applicable",
        }})
    );
    assert_eq!(desk.record(&id)["details"], json!({"permissions": asked}));
    let (_, response) = desk.ok("PERMISSIONS_CHECK_REQUEST", json!({"permissions": []}));
    assert_eq!(response, json!({"permissions": {}}));
}
