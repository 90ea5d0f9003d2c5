//! The computer-use test harness checked on its own, without the shim: the
//! private X server, the window manager and the split monitors, the test
//! window's picture and the input it reports, and the outside views
//! (pointer, active window, client list, clipboard) the end-to-end tests
//! compare the shim with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod desktop_support;

use std::time::Duration;

use desktop_support::*;

const RED: [u8; 3] = [0xd0, 0x20, 0x20];
const BLUE: [u8; 3] = [0x20, 0x40, 0xd0];

#[test]
fn xvfb_starts_on_a_display_of_its_own_with_the_test_screen() {
    let x = XServer::start(XServerOptions::new());
    assert!(x.display().starts_with(':'));
    assert!(std::path::Path::new(&format!("/tmp/.X11-unix/X{}", x.number())).exists());
    let connection = x.connect();
    let screen = &x11rb::connection::Connection::setup(&connection).roots[0];
    assert_eq!(
        [
            u32::from(screen.width_in_pixels),
            u32::from(screen.height_in_pixels)
        ],
        SCREEN
    );
    assert_eq!(screen.root_depth, 24);
    assert_eq!(
        x.monitors(),
        vec![("screen".to_owned(), false, [0, 0, 1920, 1080])]
    );
    assert_eq!(x.screen_pixel(5, 5), ROOT_COLOUR);
    assert_eq!(x.screen_pixel(1919, 1079), ROOT_COLOUR);
}

#[test]
fn two_servers_at_once_get_different_displays_and_die_with_their_handles() {
    let a = XServer::start(XServerOptions::new());
    let b = XServer::start(XServerOptions::new());
    assert_ne!(a.display(), b.display());
    let socket = format!("/tmp/.X11-unix/X{}", a.number());
    drop(a);
    assert!(
        eventually(X_WAIT, || !std::path::Path::new(&socket).exists()),
        "the dropped server's socket stayed"
    );
    assert_eq!(b.screen_pixel(0, 0), ROOT_COLOUR);
}

#[test]
fn a_display_nobody_listens_on_refuses_connections() {
    let display = unused_display();
    assert!(x11rb::connect(Some(&display)).is_err());
}

#[test]
fn openbox_manages_the_root_and_lists_the_test_windows() {
    let x = XServer::start(XServerOptions::new().window_manager());
    assert!(x.window_list().is_empty());
    let a = TestWindow::open(
        &x,
        "Harness A",
        ("harness", "Harness"),
        RED,
        [100, 100, 300, 200],
    );
    let b = TestWindow::open(
        &x,
        "Harness B",
        ("harness", "Harness"),
        BLUE,
        [600, 100, 300, 200],
    );
    let mut listed = x.window_list();
    listed.sort_unstable();
    let mut expected = vec![a.window_id(), b.window_id()];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    // The newest window has the focus; activating the other moves it.
    assert_eq!(x.active_window(), Some(b.window_id()));
    a.activate(&x);
    assert_eq!(x.active_window(), Some(a.window_id()));
}

#[test]
fn the_test_window_carries_its_title_class_and_pid() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Vault – ünïcode",
        ("keepassxc", "KeePassXC"),
        RED,
        [50, 60, 200, 150],
    );
    let id = w.window_id().to_string();
    let props = x.run_ok(
        "xprop",
        &["-id", &id, "WM_CLASS", "_NET_WM_PID", "_NET_WM_NAME"],
    );
    assert!(
        props.contains(r#"WM_CLASS(STRING) = "keepassxc", "KeePassXC""#),
        "{props}"
    );
    assert!(
        props.contains(&format!("_NET_WM_PID(CARDINAL) = {}", w.pid())),
        "{props}"
    );
    assert!(props.contains("Vault – ünïcode"), "{props}");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", w.pid())).unwrap();
    assert!(comm.trim().starts_with("python3"), "{comm}");
}

#[test]
fn the_test_window_shows_its_colour_at_its_place() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Harness Red",
        ("harness", "Harness"),
        RED,
        [200, 150, 400, 300],
    );
    let [x1, y1, x2, y2] = w.bounds(&x);
    assert_eq!((x2 - x1, y2 - y1), (400, 300));
    // The frame puts the client area at or a little beyond the asked place.
    assert!(
        (200..240).contains(&x1) && (150..200).contains(&y1),
        "{x1},{y1}"
    );
    let image = x.capture([x1 - 10, y1 - 40, 420, 350]);
    image
        .uniform([10, 40, 400, 300], RED)
        .unwrap_or_else(|e| panic!("{e}"));
    // Outside the window and its frame: the root.
    assert_eq!(x.screen_pixel(x1 - 50, y1 + 10), ROOT_COLOUR);
    assert_eq!(x.screen_pixel(x2 + 50, y1 + 10), ROOT_COLOUR);
}

#[test]
fn the_test_window_works_without_a_window_manager() {
    let x = XServer::start(XServerOptions::new());
    let w = TestWindow::open(&x, "Bare", ("bare", "Bare"), BLUE, [300, 200, 200, 100]);
    // No frame: the client area is exactly where it asked to be.
    assert_eq!(w.bounds(&x), [300, 200, 500, 300]);
    assert_eq!(x.screen_pixel(350, 250), BLUE);
    x.run_ok("xdotool", &["mousemove", "350", "250", "click", "1"]);
    w.wait_click(1, (350, 250), X_WAIT);
}

#[test]
fn the_test_window_reports_an_xdotool_click_with_root_coordinates() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Clicks",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    let (cx, cy) = w.centre(&x);
    x.run_ok(
        "xdotool",
        &["mousemove", &cx.to_string(), &cy.to_string(), "click", "1"],
    );
    w.wait_click(1, (cx, cy), X_WAIT);
    assert_eq!(x.pointer(), (cx, cy));
    assert_eq!(w.last_position(), Some((cx, cy)));
    x.run_ok(
        "xdotool",
        &["click", "3", "click", "2", "click", "--repeat", "2", "1"],
    );
    let presses = w.wait_presses(5, X_WAIT);
    let buttons: Vec<u8> = presses.iter().map(|p| p.0).collect();
    assert_eq!(buttons, [1, 3, 2, 1, 1]);
}

#[test]
fn the_test_window_reports_motion_while_a_button_is_held() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Drag",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    let [x1, y1, _, _] = w.bounds(&x);
    let point = |dx: i32, dy: i32| [(x1 + dx).to_string(), (y1 + dy).to_string()];
    let [a, b, c] = [point(10, 10), point(50, 30), point(90, 60)];
    x.run_ok(
        "xdotool",
        &[
            "mousemove",
            &a[0],
            &a[1],
            "mousedown",
            "1",
            "mousemove",
            &b[0],
            &b[1],
            "mousemove",
            &c[0],
            &c[1],
            "mouseup",
            "1",
        ],
    );
    let (cx, cy) = (x1 + 90, y1 + 60);
    assert!(eventually(X_WAIT, || w.events().iter().any(
        |e| matches!(e, Event::Release { button: 1, x, y, .. } if (*x, *y) == (cx, cy))
    )));
    let events = w.events();
    assert_eq!(presses_in(&events), [(1, x1 + 10, y1 + 10)]);
    let press = events
        .iter()
        .position(|e| matches!(e, Event::Press { .. }))
        .unwrap();
    assert!(
        events[press..].contains(&Event::Motion { x: cx, y: cy }),
        "{events:?}"
    );
}

#[test]
fn the_test_window_reports_wheel_buttons_4_to_7() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Wheel",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    let (cx, cy) = w.centre(&x);
    x.move_pointer(cx, cy);
    x.run_ok(
        "xdotool",
        &[
            "click", "4", "click", "5", "click", "6", "click", "7", "click", "--repeat", "2", "7",
        ],
    );
    let presses = w.wait_presses(6, X_WAIT);
    let buttons: Vec<u8> = presses.iter().map(|p| p.0).collect();
    assert_eq!(buttons, [4, 5, 6, 7, 7, 7]);
    // A real Shift with the vertical wheel stays a vertical wheel.
    let mark = w.mark();
    x.run_ok(
        "xdotool",
        &["keydown", "shift", "click", "4", "keyup", "shift"],
    );
    assert!(eventually(X_WAIT, || presses_in(&w.events_since(mark))
        .len()
        == 1));
    let events = w.events_since(mark);
    let state = events
        .iter()
        .find_map(|e| match e {
            Event::Press {
                button: 4, state, ..
            } => Some(*state),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(state & SHIFT_MASK, SHIFT_MASK);
}

#[test]
fn xdotool_type_arrives_as_unicode_text() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Typing",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    // In the keymap beforehand, or xdotool's fleeting bindings may be gone
    // before the window looks them up.
    x.bind_keysyms(&["eacute", "U2713", "U65E5", "U672C"]);
    w.activate(&x);
    x.run_ok("xdotool", &["type", "--delay", "20", "héllo ✓ 日本"]);
    w.wait_typed("héllo ✓ 日本", X_WAIT);
    // Control chords produce no text but are reported with their state.
    let mark = w.mark();
    x.run_ok("xdotool", &["key", "ctrl+a", "Return"]);
    assert!(eventually(X_WAIT, || keys_in(&w.events_since(mark)).len() >= 3));
    let keys = keys_in(&w.events_since(mark));
    assert!(
        keys.iter().any(|(k, s)| k == "a" && s & CONTROL_MASK != 0),
        "{keys:?}"
    );
    w.wait_typed("héllo ✓ 日本\n", X_WAIT);
}

#[test]
fn the_window_manager_leaves_every_key_to_the_windows() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Keys",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    w.activate(&x);
    // Keys openbox's stock configuration binds for itself.
    x.run_ok("xdotool", &["key", "Print", "alt+Tab", "super+d", "F12"]);
    let marker = w.sync(&x);
    let keys: Vec<String> = keys_in(&w.events()[..marker])
        .into_iter()
        .map(|k| k.0)
        .collect();
    assert_eq!(keys, ["Print", "Alt_L", "Tab", "Super_L", "d", "F12"]);
    assert_eq!(x.active_window(), Some(w.window_id()));
}

#[test]
fn sync_waits_for_everything_queued_before_it() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Sync",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    w.activate(&x);
    x.run_ok("xdotool", &["key", "--delay", "0", "a", "b", "c"]);
    let marker = w.sync(&x);
    assert_eq!(typed_text(&w.events()[..marker]), "abc");
    // Nothing sent: nothing before the next marker.
    let next = w.sync(&x);
    assert!(
        keys_in(&w.events()[marker..next]).is_empty(),
        "{:?}",
        w.events()
    );
}

#[test]
fn xclip_round_trip_and_the_owner_dies_with_the_server() {
    let x = XServer::start(XServerOptions::new());
    assert_eq!(x.clipboard(), None);
    x.set_clipboard("clipboard ✓ text");
    assert_eq!(x.clipboard().as_deref(), Some("clipboard ✓ text"));
    let owner = x.set_clipboard("second");
    assert_eq!(x.clipboard().as_deref(), Some("second"));
    assert!(std::path::Path::new(&format!("/proc/{owner}")).exists());
    drop(x);
    assert!(!std::path::Path::new(&format!("/proc/{owner}")).exists());
}

#[test]
fn the_test_window_pastes_the_clipboard_on_ctrl_v() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Paste",
        ("harness", "Harness"),
        RED,
        [100, 100, 400, 300],
    );
    x.set_clipboard("pasted ✓ text");
    w.activate(&x);
    x.run_ok("xdotool", &["key", "ctrl+v"]);
    w.wait_typed("pasted ✓ text", X_WAIT);
}

#[test]
fn two_monitors_split_the_screen_with_the_primary_first() {
    let x = XServer::start(XServerOptions::new().two_monitors(Primary::Right));
    assert_eq!(
        x.monitors(),
        vec![
            ("M1".to_owned(), true, RIGHT_MONITOR),
            ("M0".to_owned(), false, LEFT_MONITOR),
        ]
    );
    let x = XServer::start(
        XServerOptions::new()
            .two_monitors(Primary::Left)
            .window_manager(),
    );
    assert_eq!(
        x.monitors(),
        vec![
            ("M0".to_owned(), true, LEFT_MONITOR),
            ("M1".to_owned(), false, RIGHT_MONITOR),
        ]
    );
}

#[test]
fn monitors_may_leave_part_of_the_screen_uncovered() {
    let x =
        XServer::start(XServerOptions::new().monitors(&[[0, 0, 960, 1080], [960, 0, 960, 540]], 0));
    assert_eq!(
        x.monitors(),
        vec![
            ("M0".to_owned(), true, [0, 0, 960, 1080]),
            ("M1".to_owned(), false, [960, 0, 960, 540]),
        ]
    );
    // The root still spans the whole screen: the pointer can go there.
    x.move_pointer(1500, 800);
}

#[test]
fn servers_without_randr_or_xtest_lack_them() {
    let no_randr = XServer::start(XServerOptions::new().without_randr());
    let output = no_randr
        .run_for("xrandr", &["--listmonitors"], X_WAIT)
        .unwrap();
    assert!(!output.status.success());
    assert!(has_extension(&no_randr, "XTEST"));
    assert!(!has_extension(&no_randr, "RANDR"));
    let no_xtest = XServer::start(XServerOptions::new().without_xtest());
    assert!(!has_extension(&no_xtest, "XTEST"));
    assert!(has_extension(&no_xtest, "RANDR"));
}

fn has_extension(x: &XServer, name: &str) -> bool {
    use x11rb::protocol::xproto::ConnectionExt as _;
    let connection = x.connect();
    connection
        .query_extension(name.as_bytes())
        .unwrap()
        .reply()
        .unwrap()
        .present
}

#[test]
fn a_closed_test_window_leaves_the_client_list() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let mut w = TestWindow::open(
        &x,
        "Closing",
        ("harness", "Harness"),
        RED,
        [100, 100, 300, 200],
    );
    let id = w.window_id();
    w.close(&x);
    assert!(!x.window_list().contains(&id));
}

#[test]
fn decode_png_reads_back_what_the_png_encoder_wrote() {
    let (width, height) = (3u32, 2u32);
    let rgb: Vec<u8> = (0..width * height * 3).map(|n| (n * 13) as u8).collect();
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder
            .write_header()
            .unwrap()
            .write_image_data(&rgb)
            .unwrap();
    }
    let image = decode_png(&bytes);
    assert_eq!((image.width, image.height), (width, height));
    assert_eq!(image.rgb, rgb);
    assert_eq!(image.pixel(2, 1), [rgb[15], rgb[16], rgb[17]]);
    assert!(!is_jpeg(&bytes));
    assert!(is_jpeg(&[0xff, 0xd8, 0xff, 0xe0, 0, 0, 0xff, 0xd9]));
}

/// The JPEG encoder is a dependency of the desktop build only.
#[cfg(feature = "desktop")]
#[test]
fn jpeg_size_reads_the_dimensions_of_an_encoded_jpeg() {
    let (width, height) = (37u16, 21u16);
    let rgb = vec![0x80; usize::from(width) * usize::from(height) * 3];
    let mut bytes = Vec::new();
    jpeg_encoder::Encoder::new(&mut bytes, 80)
        .encode(&rgb, width, height, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    assert!(is_jpeg(&bytes));
    assert_eq!(jpeg_size(&bytes), Some((37, 21)));
    assert_eq!(jpeg_size(&bytes[..6]), None);
    assert_eq!(jpeg_size(b"not a jpeg"), None);
}

#[test]
fn wait_typed_fails_on_other_text() {
    let x = XServer::start(XServerOptions::new().window_manager());
    let w = TestWindow::open(
        &x,
        "Wrong",
        ("harness", "Harness"),
        RED,
        [100, 100, 300, 200],
    );
    w.activate(&x);
    x.run_ok("xdotool", &["type", "abd"]);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.wait_typed("abc", Duration::from_millis(500))
    }));
    assert!(failed.is_err());
}
