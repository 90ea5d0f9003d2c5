//! Hardware discovery (CAPABILITIES.md §2 and §6) against sysfs and `/dev`
//! trees built in a temporary directory with the layout Linux gives them
//! (class and bus entries are relative symbolic links into `devices/`, a
//! tty's `device` link points at its port or interface, drivers are links
//! into `bus/*/drivers/`), and against this machine's own `/sys` and `/dev`.

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use autogpt_shim::hardware::{MAX_DEVICES, Roots, Support, discover, support};
use serde_json::{Value, json};
use tempfile::TempDir;

// ---- building trees ----------------------------------------------------------

/// A sysfs tree and a device directory in a temporary directory.
struct Tree {
    _dir: TempDir,
    roots: Roots,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots {
            sys: dir.path().join("sys"),
            dev: dir.path().join("dev"),
        };
        fs::create_dir(&roots.sys).unwrap();
        fs::create_dir(&roots.dev).unwrap();
        Self { _dir: dir, roots }
    }

    /// `<sys>/<rel>`, created as a directory.
    fn dir(&self, rel: &str) -> PathBuf {
        let path = self.roots.sys.join(rel);
        fs::create_dir_all(&path).unwrap();
        path
    }

    /// Writes the attribute `<sys>/<dir>/<name>`, creating `dir`.
    fn attr(&self, dir: &str, name: &str, value: impl AsRef<[u8]>) {
        fs::write(self.dir(dir).join(name), value).unwrap();
    }

    /// Makes `<sys>/<link>` a relative symbolic link to `<sys>/<target>`,
    /// as sysfs spells its links; the target need not exist.
    fn link(&self, link: &str, target: &str) {
        let link = self.roots.sys.join(link);
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        let relative = relative_path(link.parent().unwrap(), &self.roots.sys.join(target));
        symlink(relative, link).unwrap();
    }

    /// A USB device directory under `devices/` with its ids and the given
    /// optional strings, its bus entry, and a `serial` attribute.
    fn usb_device(&self, path: &str, vid: &str, pid: &str, product: Option<&[u8]>) {
        self.attr(path, "idVendor", format!("{vid}\n"));
        self.attr(path, "idProduct", format!("{pid}\n"));
        self.attr(path, "serial", format!("SN-{vid}-{pid}-SECRET\n"));
        self.attr(path, "bDeviceClass", "00\n");
        if let Some(product) = product {
            let mut text = product.to_vec();
            text.push(b'\n');
            self.attr(path, "product", text);
        }
        self.link(&format!("bus/usb/devices/{}", leaf(path)), path);
    }

    /// A USB interface directory (no ids) with its bus entry and driver.
    fn usb_interface(&self, path: &str, driver: &str) {
        self.attr(path, "bInterfaceClass", "ff\n");
        self.link(&format!("bus/usb/devices/{}", leaf(path)), path);
        self.driver(path, &format!("bus/usb/drivers/{driver}"));
    }

    /// Binds the device at `path` to the driver directory `driver`.
    fn driver(&self, path: &str, driver: &str) {
        self.dir(driver);
        self.link(&format!("{path}/driver"), driver);
    }

    /// A tty class device `<device>/tty/<name>` with the `device` link to
    /// `device` and the `class/tty` entry.
    fn tty(&self, device: &str, name: &str) -> String {
        let class_dev = format!("{device}/tty/{name}");
        self.attr(&class_dev, "dev", "188:0\n");
        self.link(&format!("{class_dev}/device"), device);
        self.link(&format!("class/tty/{name}"), &class_dev);
        class_dev
    }

    /// A tty without hardware: `devices/virtual/tty/<name>`, no `device`.
    fn virtual_tty(&self, name: &str) {
        let class_dev = format!("devices/virtual/tty/{name}");
        self.attr(&class_dev, "dev", "4:0\n");
        self.link(&format!("class/tty/{name}"), &class_dev);
    }

    /// A plain file `<dev>/<name>`.
    fn dev_file(&self, name: &str) {
        fs::write(self.roots.dev.join(name), b"").unwrap();
    }

    fn port(&self, name: &str) -> String {
        self.roots.dev.join(name).to_str().unwrap().to_owned()
    }
}

fn leaf(path: &str) -> &str {
    path.rsplit('/').next().unwrap()
}

/// `target` relative to the directory `from` (both absolute), spelled as
/// sysfs spells it: up to the common ancestor, then down by name, even when
/// the target is itself an ancestor (`device -> ../../../ttyUSB0`).
fn relative_path(from: &Path, target: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let common = common.min(to.len() - 1);
    let mut relative = PathBuf::new();
    for _ in common..from.len() {
        relative.push("..");
    }
    for component in &to[common..] {
        relative.push(component);
    }
    relative
}

const PCI: &str = "devices/pci0000:00/0000:00:14.0";

/// A machine with an xHCI controller (two root hubs), an FTDI adapter, an
/// Arduino on cdc_acm, a hub with a CP210x adapter behind it, a CH340 with
/// a non-UTF-8 product string, a receiver with no strings, two legacy UARTs
/// (one detected), a PL011, virtual terminals, an unbound rfcomm, and
/// entries that cannot be read.
fn machine() -> Tree {
    let t = Tree::new();
    // Root hubs, each with its own interface.
    t.usb_device(
        &format!("{PCI}/usb1"),
        "1d6b",
        "0002",
        Some(b"xHCI Host Controller"),
    );
    t.attr(
        &format!("{PCI}/usb1"),
        "manufacturer",
        "Linux 6.8.0 xhci-hcd\n",
    );
    t.usb_interface(&format!("{PCI}/usb1/1-0:1.0"), "hub");
    t.usb_device(
        &format!("{PCI}/usb2"),
        "1d6b",
        "0003",
        Some(b"xHCI Host Controller"),
    );
    t.usb_interface(&format!("{PCI}/usb2/2-0:1.0"), "hub");

    // FTDI: the tty's device is the usb-serial port below the interface.
    let ftdi = format!("{PCI}/usb1/1-2");
    t.usb_device(&ftdi, "0403", "6001", Some(b"FT232R USB UART"));
    t.attr(&ftdi, "manufacturer", "FTDI\n");
    t.usb_interface(&format!("{ftdi}/1-2:1.0"), "ftdi_sio");
    let port = format!("{ftdi}/1-2:1.0/ttyUSB0");
    t.dir(&port);
    t.driver(&port, "bus/usb-serial/drivers/ftdi_sio");
    t.tty(&port, "ttyUSB0");

    // cdc_acm: the tty's device is the interface itself.
    let uno = format!("{PCI}/usb1/1-3");
    t.usb_device(&uno, "2341", "0043", Some(b"Arduino Uno"));
    t.attr(&uno, "manufacturer", "Arduino (www.arduino.cc)\n");
    t.usb_interface(&format!("{uno}/1-3:1.0"), "cdc_acm");
    t.tty(&format!("{uno}/1-3:1.0"), "ttyACM0");

    // A hub, and behind it an adapter without a product string.
    let hub = format!("{PCI}/usb1/1-4");
    t.usb_device(&hub, "05e3", "0608", Some(b"USB2.0 Hub"));
    t.attr(&hub, "bDeviceClass", "09\n");
    t.usb_interface(&format!("{hub}/1-4:1.0"), "hub");
    let cp = format!("{hub}/1-4.1");
    t.usb_device(&cp, "10C4", "EA60", None);
    t.attr(&cp, "manufacturer", "Silicon Labs\n");
    t.usb_interface(&format!("{cp}/1-4.1:1.0"), "cp210x");
    let port = format!("{cp}/1-4.1:1.0/ttyUSB1");
    t.dir(&port);
    t.driver(&port, "bus/usb-serial/drivers/cp210x");
    t.tty(&port, "ttyUSB1");

    // A product string that is not UTF-8 (Latin-1 é).
    let ch = format!("{PCI}/usb1/1-5");
    t.usb_device(&ch, "1a86", "7523", Some(b"USB Caf\xe9 Serial"));
    t.usb_interface(&format!("{ch}/1-5:1.0"), "ch341");
    let port = format!("{ch}/1-5:1.0/ttyUSB2");
    t.dir(&port);
    t.driver(&port, "bus/usb-serial/drivers/ch341-uart");
    t.tty(&port, "ttyUSB2");

    // No product and no manufacturer.
    t.usb_device(&format!("{PCI}/usb1/1-6"), "046d", "c52b", None);

    // Unreadable: `idVendor` is a directory; a bus entry whose target is gone.
    let odd = format!("{PCI}/usb1/1-7");
    t.dir(&format!("{odd}/idVendor"));
    t.attr(&odd, "idProduct", "1234\n");
    t.attr(&odd, "product", "Odd Device\n");
    t.link("bus/usb/devices/1-7", &odd);
    t.link("bus/usb/devices/1-9", &format!("{PCI}/usb1/1-9"));

    // Legacy UARTs: ttyS0 undetected (type 0), ttyS1 a 16550A (type 4).
    let pnp = "devices/pnp0/00:05";
    t.dir(pnp);
    t.driver(pnp, "bus/pnp/drivers/serial");
    let class_dev = t.tty(pnp, "ttyS0");
    t.attr(&class_dev, "type", "0\n");
    let platform = "devices/platform/serial8250";
    t.dir(platform);
    t.driver(platform, "bus/platform/drivers/serial8250");
    let class_dev = t.tty(platform, "ttyS1");
    t.attr(&class_dev, "type", "4\n");
    // ttyS2: `type` is a FIFO (opening it must not hang); ttyS3: no `type`.
    let class_dev = t.tty(platform, "ttyS2");
    let fifo = t.roots.sys.join(&class_dev).join("type");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    t.tty(platform, "ttyS3");

    // A PL011 on an ARM board.
    let amba = "devices/platform/fe201000.serial";
    t.dir(amba);
    t.driver(amba, "bus/amba/drivers/uart-pl011");
    t.tty(amba, "ttyAMA0");

    // No hardware behind these.
    for name in ["console", "ptmx", "tty", "tty0", "tty1", "rfcomm0"] {
        t.virtual_tty(name);
    }

    // Unreadable: a class entry whose target is gone, and one whose
    // `device` link dangles.
    t.link(
        "class/tty/ttyUSB9",
        &format!("{PCI}/usb1/1-8/1-8:1.0/ttyUSB9/tty/ttyUSB9"),
    );
    let gone = format!("{PCI}/usb1/1-3/1-3:1.2");
    let class_dev = format!("{gone}/tty/ttyACM1");
    t.dir(&class_dev);
    t.link(
        &format!("{class_dev}/device"),
        &format!("{PCI}/usb1/1-3/1-3:1.3"),
    );
    t.link("class/tty/ttyACM1", &class_dev);

    // GPIO chips that are plain files, one that is a character device but
    // no GPIO chip, and names that are not chips.
    for name in [
        "gpiochip0",
        "gpiochip10",
        "gpiochip2",
        "gpiochipX",
        "gpiochip",
        "ttyUSB0",
    ] {
        t.dev_file(name);
    }
    symlink("/dev/null", t.roots.dev.join("gpiochip1")).unwrap();
    t
}

fn devices(roots: &Roots) -> Vec<Value> {
    discover(roots).into_iter().map(Value::Object).collect()
}

fn find<'a>(devices: &'a [Value], key: &str, value: &str) -> Option<&'a Value> {
    devices.iter().find(|device| device[key] == value)
}

fn ports(devices: &[Value]) -> Vec<String> {
    devices
        .iter()
        .filter(|device| device["type"] == "serial")
        .map(|device| device["port"].as_str().unwrap().to_owned())
        .collect()
}

// ---- the whole machine -------------------------------------------------------

#[test]
fn discovery_lists_serial_then_usb_then_gpio_each_sorted_by_path() {
    let t = machine();
    let chip = |name: &str| t.roots.dev.join(name).to_str().unwrap().to_owned();
    let expected = json!([
        {"type": "serial", "port": t.port("ttyACM0"), "desc": "Arduino Uno", "vid": "2341", "pid": "0043"},
        {"type": "serial", "port": t.port("ttyAMA0"), "desc": "uart-pl011"},
        {"type": "serial", "port": t.port("ttyS1"), "desc": "serial8250"},
        {"type": "serial", "port": t.port("ttyUSB0"), "desc": "FT232R USB UART", "vid": "0403", "pid": "6001"},
        {"type": "serial", "port": t.port("ttyUSB1"), "desc": "cp210x", "vid": "10c4", "pid": "ea60"},
        {"type": "serial", "port": t.port("ttyUSB2"), "desc": "USB Caf\u{fffd} Serial", "vid": "1a86", "pid": "7523"},
        {"type": "usb", "vid": "0403", "pid": "6001", "desc": "FT232R USB UART"},
        {"type": "usb", "vid": "2341", "pid": "0043", "desc": "Arduino Uno"},
        {"type": "usb", "vid": "05e3", "pid": "0608", "desc": "USB2.0 Hub"},
        {"type": "usb", "vid": "10c4", "pid": "ea60", "desc": "Silicon Labs"},
        {"type": "usb", "vid": "1a86", "pid": "7523", "desc": "USB Caf\u{fffd} Serial"},
        {"type": "usb", "vid": "046d", "pid": "c52b", "desc": ""},
        {"type": "gpio", "chip": chip("gpiochip0"), "label": null, "lines": null},
        {"type": "gpio", "chip": chip("gpiochip1"), "label": null, "lines": null},
        {"type": "gpio", "chip": chip("gpiochip10"), "label": null, "lines": null},
        {"type": "gpio", "chip": chip("gpiochip2"), "label": null, "lines": null},
    ]);
    assert_eq!(Value::Array(devices(&t.roots)), expected);
}

#[test]
fn objects_carry_exactly_the_fields_of_their_type() {
    let t = machine();
    for device in discover(&t.roots) {
        let mut keys: Vec<&str> = device.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let expected: &[&str] = match device["type"].as_str().unwrap() {
            "serial" if device.contains_key("vid") => &["desc", "pid", "port", "type", "vid"],
            "serial" => &["desc", "port", "type"],
            "usb" => &["desc", "pid", "type", "vid"],
            "gpio" => &["chip", "label", "lines", "type"],
            other => panic!("unexpected type {other}"),
        };
        assert_eq!(keys, expected, "{device:?}");
    }
}

// ---- serial rules ------------------------------------------------------------

#[test]
fn usb_serial_adapter_is_described_by_its_usb_product_with_ids() {
    let t = machine();
    let devices = devices(&t.roots);
    let port = find(&devices, "port", &t.port("ttyUSB0")).unwrap();
    assert_eq!(port["desc"], "FT232R USB UART");
    assert_eq!(
        (&port["vid"], &port["pid"]),
        (&json!("0403"), &json!("6001"))
    );
}

#[test]
fn acm_port_on_an_interface_finds_the_usb_device_above_it() {
    let t = machine();
    let devices = devices(&t.roots);
    let port = find(&devices, "port", &t.port("ttyACM0")).unwrap();
    assert_eq!(port["desc"], "Arduino Uno");
    assert_eq!(
        (&port["vid"], &port["pid"]),
        (&json!("2341"), &json!("0043"))
    );
}

#[test]
fn usb_port_without_a_product_string_is_described_by_its_driver_with_lowercase_ids() {
    let t = machine();
    let devices = devices(&t.roots);
    let port = find(&devices, "port", &t.port("ttyUSB1")).unwrap();
    assert_eq!(port["desc"], "cp210x");
    assert_eq!(
        (&port["vid"], &port["pid"]),
        (&json!("10c4"), &json!("ea60"))
    );
}

#[test]
fn empty_product_string_counts_as_absent() {
    let t = Tree::new();
    let pl = format!("{PCI}/usb1/1-1");
    t.usb_device(&pl, "067b", "2303", Some(b""));
    t.attr(&pl, "manufacturer", "Prolific Technology Inc.\n");
    t.usb_interface(&format!("{pl}/1-1:1.0"), "pl2303");
    let port = format!("{pl}/1-1:1.0/ttyUSB0");
    t.dir(&port);
    t.driver(&port, "bus/usb-serial/drivers/pl2303");
    t.tty(&port, "ttyUSB0");
    assert_eq!(
        devices(&t.roots),
        vec![
            json!({"type": "serial", "port": t.port("ttyUSB0"), "desc": "pl2303", "vid": "067b", "pid": "2303"}),
            json!({"type": "usb", "vid": "067b", "pid": "2303", "desc": "Prolific Technology Inc."}),
        ]
    );
}

#[test]
fn ports_off_usb_are_described_by_their_driver_without_ids() {
    let t = machine();
    let devices = devices(&t.roots);
    for (name, driver) in [("ttyS1", "serial8250"), ("ttyAMA0", "uart-pl011")] {
        let port = find(&devices, "port", &t.port(name)).unwrap();
        assert_eq!(port["desc"], driver);
        assert!(
            port.get("vid").is_none() && port.get("pid").is_none(),
            "{port}"
        );
    }
}

#[test]
fn port_without_usb_device_or_driver_is_described_by_its_name() {
    let t = Tree::new();
    let uart = "devices/platform/soc/3f215040.serial";
    t.dir(uart);
    t.tty(uart, "ttyTHS0");
    let devices = devices(&t.roots);
    assert_eq!(
        devices,
        vec![json!({"type": "serial", "port": t.port("ttyTHS0"), "desc": "ttyTHS0"})]
    );
}

#[test]
fn legacy_uarts_are_listed_only_with_a_nonzero_type() {
    let t = machine();
    let ports = ports(&devices(&t.roots));
    assert!(ports.contains(&t.port("ttyS1")));
    // Type 0, a FIFO where `type` should be, and no `type` at all.
    for name in ["ttyS0", "ttyS2", "ttyS3"] {
        assert!(!ports.contains(&t.port(name)), "{name}");
    }
}

#[test]
fn ttys_without_a_device_link_are_left_out() {
    let t = machine();
    let ports = ports(&devices(&t.roots));
    for name in ["rfcomm0", "tty0", "tty1", "console", "ptmx", "tty"] {
        assert!(!ports.contains(&t.port(name)), "{name}");
    }
}

#[test]
fn unreadable_tty_entries_are_skipped() {
    let t = machine();
    let ports = ports(&devices(&t.roots));
    // ttyUSB9's class entry and ttyACM1's device link both dangle.
    for name in ["ttyUSB9", "ttyACM1"] {
        assert!(!ports.contains(&t.port(name)), "{name}");
    }
}

#[test]
fn ancestor_search_stops_at_the_sysfs_root() {
    // USB ids in the directory above the sysfs root belong to nothing.
    let t = Tree::new();
    let above = t.roots.sys.parent().unwrap();
    fs::write(above.join("idVendor"), "0403\n").unwrap();
    fs::write(above.join("idProduct"), "6001\n").unwrap();
    fs::write(above.join("product"), "Not a device\n").unwrap();
    let uart = "devices/platform/serial8250";
    t.dir(uart);
    t.driver(uart, "bus/platform/drivers/serial8250");
    let class_dev = t.tty(uart, "ttyS4");
    t.attr(&class_dev, "type", "4\n");
    assert_eq!(
        devices(&t.roots),
        vec![json!({"type": "serial", "port": t.port("ttyS4"), "desc": "serial8250"})]
    );
}

// ---- USB rules ---------------------------------------------------------------

#[test]
fn root_hubs_and_interfaces_are_not_usb_devices() {
    let t = machine();
    let devices = devices(&t.roots);
    assert!(find(&devices, "vid", "1d6b").is_none());
    assert!(find(&devices, "desc", "xHCI Host Controller").is_none());
    // Interfaces have no ids: six readable devices, no more.
    let usb = devices
        .iter()
        .filter(|device| device["type"] == "usb")
        .count();
    assert_eq!(usb, 6);
}

#[test]
fn usb_desc_is_product_else_manufacturer_else_empty() {
    let t = machine();
    let devices = devices(&t.roots);
    let usb = |vid: &str| {
        devices
            .iter()
            .find(|device| device["type"] == "usb" && device["vid"] == vid)
            .unwrap()
    };
    assert_eq!(usb("05e3")["desc"], "USB2.0 Hub");
    assert_eq!(usb("10c4")["desc"], "Silicon Labs");
    assert_eq!(usb("046d")["desc"], "");
}

#[test]
fn unreadable_usb_entries_are_skipped() {
    let t = machine();
    let devices = devices(&t.roots);
    // 1-7's idVendor is a directory; 1-9 points nowhere.
    assert!(find(&devices, "pid", "1234").is_none());
    assert!(find(&devices, "desc", "Odd Device").is_none());
}

#[test]
fn non_utf8_product_string_is_kept_with_replacement_characters() {
    let t = machine();
    let devices = devices(&t.roots);
    let port = find(&devices, "port", &t.port("ttyUSB2")).unwrap();
    assert_eq!(port["desc"], "USB Caf\u{fffd} Serial");
    let usb = find(&devices, "vid", "1a86").unwrap();
    assert_eq!(usb["desc"], "USB Caf\u{fffd} Serial");
}

#[test]
fn serial_numbers_never_appear() {
    let t = machine();
    let text = serde_json::to_string(&devices(&t.roots)).unwrap();
    // Every USB device of the tree has a `serial` attribute holding SECRET.
    assert!(!text.contains("SECRET"), "{text}");
    assert!(!text.contains("\"serial\":"), "{text}");
}

#[test]
fn attribute_without_read_permission_skips_the_device_unless_still_readable() {
    let t = Tree::new();
    let dev = format!("{PCI}/usb1/1-2");
    t.usb_device(&dev, "0403", "6001", Some(b"FT232R USB UART"));
    let vendor = t.roots.sys.join(&dev).join("idVendor");
    fs::set_permissions(&vendor, fs::Permissions::from_mode(0o000)).unwrap();
    // Root (CAP_DAC_OVERRIDE) still reads a mode-000 file; then the device
    // is readable and must be listed.
    let readable = fs::File::open(&vendor).is_ok();
    let expected = if readable {
        vec![json!({"type": "usb", "vid": "0403", "pid": "6001", "desc": "FT232R USB UART"})]
    } else {
        vec![]
    };
    assert_eq!(devices(&t.roots), expected);
}

// ---- GPIO --------------------------------------------------------------------

#[test]
fn gpio_chips_that_do_not_answer_have_null_label_and_lines() {
    let t = machine();
    let devices = devices(&t.roots);
    let chips: Vec<&Value> = devices.iter().filter(|d| d["type"] == "gpio").collect();
    let names: Vec<&str> = chips
        .iter()
        .map(|chip| leaf(chip["chip"].as_str().unwrap()))
        .collect();
    // gpiochip1 is /dev/null: a character device that rejects the ioctl.
    assert_eq!(names, ["gpiochip0", "gpiochip1", "gpiochip10", "gpiochip2"]);
    for chip in chips {
        assert!(chip["label"].is_null() && chip["lines"].is_null(), "{chip}");
    }
}

// ---- the cap -----------------------------------------------------------------

#[test]
fn at_most_64_devices_with_serial_first_then_usb_in_order() {
    let t = Tree::new();
    let mut names = Vec::new();
    for n in 1..=100 {
        let name = format!("1-{n}");
        let path = format!("{PCI}/usb1/{name}");
        let product = format!("Device {n}");
        t.usb_device(&path, "abcd", &format!("{n:04x}"), Some(product.as_bytes()));
        names.push((name, product));
    }
    for (n, name) in [(7, "ttyUSB0"), (93, "ttyUSB1")] {
        let port = format!("{PCI}/usb1/1-{n}/1-{n}:1.0/{name}");
        t.dir(&port);
        t.tty(&port, name);
    }
    t.dev_file("gpiochip0");
    let devices = devices(&t.roots);
    assert_eq!(devices.len(), MAX_DEVICES);
    assert_eq!(ports(&devices), [t.port("ttyUSB0"), t.port("ttyUSB1")]);
    assert!(devices[..2].iter().all(|d| d["type"] == "serial"));
    // The USB devices that fit, in the byte order of their entry names.
    names.sort();
    let expected: Vec<&str> = names[..MAX_DEVICES - 2]
        .iter()
        .map(|(_, p)| p.as_str())
        .collect();
    let listed: Vec<&str> = devices[2..]
        .iter()
        .map(|d| {
            assert_eq!(d["type"], "usb");
            d["desc"].as_str().unwrap()
        })
        .collect();
    assert_eq!(listed, expected);
}

// ---- support -----------------------------------------------------------------

#[test]
fn support_follows_what_the_roots_hold() {
    let t = Tree::new();
    assert_eq!(support(&t.roots), Support::default());
    t.dir("class/tty");
    assert_eq!(
        support(&t.roots),
        Support {
            serial: true,
            usb: false,
            gpio: false
        }
    );
    t.dir("bus/usb/devices");
    t.dev_file("gpiochip0");
    assert_eq!(
        support(&t.roots),
        Support {
            serial: true,
            usb: true,
            gpio: true
        }
    );
}

#[test]
fn any_gpiochip_entry_counts_for_gpio_support() {
    // CAPABILITIES.md §2 checks `gpiochip*`; §6 lists only `gpiochip<N>`.
    let t = Tree::new();
    t.dev_file("gpiochipX");
    assert!(support(&t.roots).gpio);
    assert_eq!(devices(&t.roots), Vec::<Value>::new());
}

#[test]
fn missing_roots_give_no_support_and_no_devices() {
    let roots = Roots {
        sys: PathBuf::from("/nonexistent/sys"),
        dev: PathBuf::from("/nonexistent/dev"),
    };
    assert_eq!(support(&roots), Support::default());
    assert!(discover(&roots).is_empty());
}

// ---- this machine ------------------------------------------------------------

/// The nearest directory at or above `dir` (inside /sys) with `idVendor`.
fn has_usb_ancestor(dir: &Path) -> bool {
    dir.ancestors()
        .take_while(|d| *d != Path::new("/sys"))
        .any(|d| d.join("idVendor").is_file())
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read(path)
        .ok()
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
}

#[test]
fn this_machine_matches_an_independent_listing() {
    let system = Roots::system();

    let has_gpiochip = fs::read_dir("/dev")
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("gpiochip"))
        })
        .unwrap_or(false);
    assert_eq!(
        support(&system),
        Support {
            serial: fs::read_dir("/sys/class/tty").is_ok(),
            usb: fs::read_dir("/sys/bus/usb/devices").is_ok(),
            gpio: has_gpiochip,
        }
    );

    // Serial ports: name rule, `type` rule, `device` link.
    let mut serial = Vec::new();
    let mut names: Vec<String> = fs::read_dir("/sys/class/tty")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names {
        let entry = Path::new("/sys/class/tty").join(&name);
        let listed = ["ttyUSB", "ttyACM", "ttyAMA", "ttyTHS", "rfcomm"]
            .iter()
            .any(|p| name.starts_with(p))
            || (name.starts_with("ttyS")
                && read_trimmed(&entry.join("type"))
                    .and_then(|t| t.parse::<u64>().ok())
                    .is_some_and(|t| t != 0));
        let Ok(device) = fs::canonicalize(entry.join("device")) else {
            continue;
        };
        if listed {
            serial.push((name, device));
        }
    }

    // USB devices: ids present, not a root hub.
    let mut usb = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir("/sys/bus/usb/devices")
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for entry in entries {
        let (Some(vid), Some(pid)) = (
            read_trimmed(&entry.join("idVendor")),
            read_trimmed(&entry.join("idProduct")),
        ) else {
            continue;
        };
        if vid != "1d6b" {
            usb.push((vid, pid));
        }
    }

    // GPIO chips.
    let mut chips: Vec<String> = fs::read_dir("/dev")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("gpiochip")
                        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default();
    chips.sort();

    let found = devices(&system);
    let total = (serial.len() + usb.len() + chips.len()).min(MAX_DEVICES);
    assert_eq!(found.len(), total, "{found:?}");

    let mut found = found.iter();
    for (name, device) in serial.iter().take(MAX_DEVICES) {
        let port = found.next().unwrap();
        assert_eq!(port["type"], "serial");
        assert_eq!(port["port"], format!("/dev/{name}"));
        if has_usb_ancestor(device) {
            for key in ["vid", "pid"] {
                let id = port[key].as_str().unwrap();
                assert!(
                    id.len() == 4 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{port}"
                );
            }
        } else {
            let driver = fs::read_link(device.join("driver"))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| name.clone());
            assert_eq!(port["desc"], driver.as_str(), "{port}");
            assert!(port.get("vid").is_none(), "{port}");
        }
    }
    for (vid, pid) in usb {
        let Some(device) = found.next() else { break };
        assert_eq!(device["type"], "usb");
        assert_eq!((&device["vid"], &device["pid"]), (&json!(vid), &json!(pid)));
    }
    for chip in chips {
        let Some(device) = found.next() else { break };
        assert_eq!(device["type"], "gpio");
        assert_eq!(device["chip"], format!("/dev/{chip}"));
    }
}
