//! Hardware discovery (CAPABILITIES.md §2 and §6): whether serial, USB and
//! GPIO discovery can work on this machine ([`support`], the Rust dependency
//! checks of `hardware_serial`, `hardware_usb` and `hardware_gpio`), and the
//! device objects of `HELLO.hardware_devices` ([`discover`]): serial ports
//! from `/sys/class/tty`, USB devices from `/sys/bus/usb/devices` and GPIO
//! chips from `/dev/gpiochip<N>`.
//!
//! It only reads: small sysfs attribute files (each read bounded), symbolic
//! links, directory listings, and one chip-information ioctl on a GPIO
//! character device opened read-only. It must never include a serial number
//! (no `serial` attribute is ever opened), never fail or panic (an entry
//! that cannot be read is skipped, a GPIO chip that cannot be asked has null
//! fields), never block on what it opens, and never do unbounded work
//! whatever the directories contain.

use std::fs;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Most device objects [`discover`] returns (CAPABILITIES.md §6).
pub const MAX_DEVICES: usize = 64;

/// Most bytes read from one sysfs attribute. The longest attribute read is a
/// USB string descriptor, which the kernel caches as at most 126 UTF-16
/// units converted to UTF-8 (3 bytes each at most), so this never cuts a
/// genuine value short.
const MAX_ATTRIBUTE_BYTES: u64 = 512;

/// Most parent directories looked at above a serial port's device when
/// searching for its USB device. Real paths are a few PCI bridges and at
/// most seven USB tiers deep; the bound keeps a hostile tree from making
/// the walk long.
const MAX_ANCESTOR_STEPS: usize = 32;

/// Most entries read from one directory listing. Even a large machine has
/// a few thousand entries in `/dev`; the bound only stops a pathological
/// directory from making a HELLO slow.
const MAX_DIRECTORY_ENTRIES: usize = 16_384;

/// Serial port name prefixes that are listed whatever their UART type.
const SERIAL_PREFIXES: [&str; 5] = ["ttyUSB", "ttyACM", "ttyAMA", "ttyTHS", "rfcomm"];

/// Vendor id of the Linux Foundation, which every root hub reports.
const ROOT_HUB_VENDOR: &str = "1d6b";

/// Where discovery looks: the sysfs mount and the device directory. Tests
/// point these at a constructed tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The sysfs mount, `/sys` on a real system.
    pub sys: PathBuf,
    /// The device node directory, `/dev` on a real system.
    pub dev: PathBuf,
}

impl Roots {
    /// The machine's own `/sys` and `/dev`.
    pub fn system() -> Self {
        Self {
            sys: PathBuf::from("/sys"),
            dev: PathBuf::from("/dev"),
        }
    }
}

/// Results of the Rust dependency checks of CAPABILITIES.md §2 for the
/// three hardware capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Support {
    /// `hardware_serial`: `<sys>/class/tty` can be listed.
    pub serial: bool,
    /// `hardware_usb`: `<sys>/bus/usb/devices` can be listed.
    pub usb: bool,
    /// `hardware_gpio`: at least one `<dev>/gpiochip*` exists.
    pub gpio: bool,
}

/// The dependency checks of CAPABILITIES.md §2 under `roots`.
pub fn support(roots: &Roots) -> Support {
    let gpio = entry_names(&roots.dev)
        .is_some_and(|names| names.iter().any(|name| name.starts_with("gpiochip")));
    Support {
        serial: fs::read_dir(roots.sys.join("class/tty")).is_ok(),
        usb: fs::read_dir(roots.sys.join("bus/usb/devices")).is_ok(),
        gpio,
    }
}

/// The device objects of CAPABILITIES.md §6 under `roots`: serial ports
/// (sorted by port path), then USB devices (sorted by their entry in
/// `<sys>/bus/usb/devices`), then GPIO chips (sorted by chip path), at most
/// [`MAX_DEVICES`] in all. Paths are sorted in byte order (`ttyUSB10`
/// before `ttyUSB2`).
///
/// Ports and chips are named under `roots.dev`, which is `/dev` for
/// [`Roots::system`]. Never fails: what cannot be read is left out.
pub fn discover(roots: &Roots) -> Vec<Map<String, Value>> {
    let mut devices = serial_ports(roots, MAX_DEVICES);
    let room = MAX_DEVICES.saturating_sub(devices.len());
    devices.extend(usb_devices(roots, room));
    let room = MAX_DEVICES.saturating_sub(devices.len());
    devices.extend(gpio_chips(roots, room));
    devices
}

// ---- serial ------------------------------------------------------------------

/// Up to `limit` serial port objects.
fn serial_ports(roots: &Roots, limit: usize) -> Vec<Map<String, Value>> {
    if limit == 0 {
        return Vec::new();
    }
    let class = roots.sys.join("class/tty");
    let Some(mut names) = entry_names(&class) else {
        return Vec::new();
    };
    // The port path is the dev root joined with the name, so sorting the
    // names sorts the paths.
    names.retain(|name| is_serial_candidate(name));
    names.sort();
    // Ancestor walks stop at the sysfs root, which is compared in its
    // resolved form because the device links resolve to it.
    let Ok(sys) = fs::canonicalize(&roots.sys) else {
        return Vec::new();
    };
    let mut ports = Vec::new();
    for name in names {
        if ports.len() >= limit {
            break;
        }
        if let Some(port) = serial_port(roots, &sys, &class.join(&name), &name) {
            ports.push(port);
        }
    }
    ports
}

/// Whether a tty name can be a listed serial port; `ttyS*` ports are
/// decided later by their UART type.
fn is_serial_candidate(name: &str) -> bool {
    SERIAL_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || name.starts_with("ttyS")
}

/// The object of the tty class entry `entry`, if it is a serial port.
fn serial_port(roots: &Roots, sys: &Path, entry: &Path, name: &str) -> Option<Map<String, Value>> {
    let always = SERIAL_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix));
    // A `ttyS*` entry is listed only when a UART was detected behind it
    // (type 0 is PORT_UNKNOWN: the legacy 8250 placeholders every PC has).
    let detected = always || uart_type(entry).is_some_and(|kind| kind != 0);
    if !detected {
        return None;
    }
    // Virtual terminals and other ttys without hardware have no `device`.
    let device = fs::canonicalize(entry.join("device")).ok()?;
    if !device.is_dir() {
        return None;
    }
    let port = roots.dev.join(name).to_str()?.to_owned();
    let usb = usb_ancestor(sys, &device);
    let desc = usb
        .as_ref()
        .and_then(|usb| usb.product.clone())
        .or_else(|| driver_name(&device))
        .unwrap_or_else(|| name.to_owned());
    let mut object = Map::new();
    object.insert("type".into(), Value::from("serial"));
    object.insert("port".into(), Value::from(port));
    object.insert("desc".into(), Value::from(desc));
    if let Some(usb) = usb {
        object.insert("vid".into(), Value::from(usb.vid));
        object.insert("pid".into(), Value::from(usb.pid));
    }
    Some(object)
}

/// The `type` attribute of a serial-core port as a number.
fn uart_type(entry: &Path) -> Option<u64> {
    read_attribute(&entry.join("type"))?.parse().ok()
}

/// What a serial port reports of the USB device it belongs to.
#[derive(Debug, PartialEq, Eq)]
struct UsbAncestor {
    vid: String,
    pid: String,
    product: Option<String>,
}

/// The nearest USB device at or above `device`: the first directory with
/// valid `idVendor` and `idProduct` attributes, looking no higher than the
/// sysfs root `sys` and no more than [`MAX_ANCESTOR_STEPS`] levels up.
fn usb_ancestor(sys: &Path, device: &Path) -> Option<UsbAncestor> {
    let mut dir = device;
    for _ in 0..=MAX_ANCESTOR_STEPS {
        if dir == sys || !dir.starts_with(sys) {
            return None;
        }
        if let Some((vid, pid)) = usb_ids(dir) {
            let product = read_attribute(&dir.join("product")).filter(|text| !text.is_empty());
            return Some(UsbAncestor { vid, pid, product });
        }
        dir = dir.parent()?;
    }
    None
}

/// The file name of the `driver` link of `device`: the bound driver.
fn driver_name(device: &Path) -> Option<String> {
    let target = fs::read_link(device.join("driver")).ok()?;
    let name = target.file_name()?.to_str()?;
    (!name.is_empty()).then(|| name.to_owned())
}

// ---- USB ---------------------------------------------------------------------

/// Up to `limit` USB device objects.
fn usb_devices(roots: &Roots, limit: usize) -> Vec<Map<String, Value>> {
    if limit == 0 {
        return Vec::new();
    }
    let bus = roots.sys.join("bus/usb/devices");
    let Some(mut names) = entry_names(&bus) else {
        return Vec::new();
    };
    names.sort();
    let mut devices = Vec::new();
    for name in names {
        if devices.len() >= limit {
            break;
        }
        if let Some(device) = usb_device(&bus.join(&name)) {
            devices.push(device);
        }
    }
    devices
}

/// The object of the USB bus entry `entry`, if it is a device (interfaces
/// have no ids) and not a root hub.
fn usb_device(entry: &Path) -> Option<Map<String, Value>> {
    let (vid, pid) = usb_ids(entry)?;
    if vid == ROOT_HUB_VENDOR {
        return None;
    }
    let desc = [entry.join("product"), entry.join("manufacturer")]
        .iter()
        .filter_map(|path| read_attribute(path))
        .find(|text| !text.is_empty())
        .unwrap_or_default();
    let mut object = Map::new();
    object.insert("type".into(), Value::from("usb"));
    object.insert("vid".into(), Value::from(vid));
    object.insert("pid".into(), Value::from(pid));
    object.insert("desc".into(), Value::from(desc));
    Some(object)
}

/// The vendor and product ids of the USB device directory `dir`, each as
/// four lowercase hex digits; `None` when either is missing or malformed.
fn usb_ids(dir: &Path) -> Option<(String, String)> {
    let vid = hex_id(&read_attribute(&dir.join("idVendor"))?)?;
    let pid = hex_id(&read_attribute(&dir.join("idProduct"))?)?;
    Some((vid, pid))
}

/// `text` as four lowercase hex digits, if it is four hex digits. The
/// kernel always writes them so; anything else is not a USB id.
fn hex_id(text: &str) -> Option<String> {
    (text.len() == 4 && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

// ---- GPIO --------------------------------------------------------------------

/// Up to `limit` GPIO chip objects.
fn gpio_chips(roots: &Roots, limit: usize) -> Vec<Map<String, Value>> {
    if limit == 0 {
        return Vec::new();
    }
    let Some(mut names) = entry_names(&roots.dev) else {
        return Vec::new();
    };
    names.retain(|name| is_gpio_chip_name(name));
    names.sort();
    let mut chips = Vec::new();
    for name in names.into_iter().take(limit) {
        let path = roots.dev.join(&name);
        let Some(chip) = path.to_str() else {
            continue;
        };
        let (label, lines) = match chip_info(&path) {
            Some((label, lines)) => (Value::from(label), Value::from(lines)),
            None => (Value::Null, Value::Null),
        };
        let mut object = Map::new();
        object.insert("type".into(), Value::from("gpio"));
        object.insert("chip".into(), Value::from(chip));
        object.insert("label".into(), label);
        object.insert("lines".into(), lines);
        chips.push(object);
    }
    chips
}

/// Whether `name` is `gpiochip<N>` with a decimal `N`.
fn is_gpio_chip_name(name: &str) -> bool {
    name.strip_prefix("gpiochip")
        .is_some_and(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// Label and line count of the GPIO chip at `path`, when it opens
/// read-only and is a character device that answers the chip-info ioctl.
fn chip_info(path: &Path) -> Option<(String, u32)> {
    use rustix::fs::{FileType, Mode, OFlags};
    // Non-blocking and no controlling terminal: whatever the node turns out
    // to be, opening it must neither wait nor change the process.
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    // Only a character device is asked: the ioctl number means nothing to
    // a regular file, and a node of another kind is not a GPIO chip.
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::CharacterDevice {
        return None;
    }
    crate::sys::gpio_chip_info(fd.as_fd()).ok()
}

// ---- bounded reading ---------------------------------------------------------

/// The UTF-8 names of the entries of `dir` (at most
/// [`MAX_DIRECTORY_ENTRIES`]), or `None` if it cannot be listed. Entries
/// that fail to read are left out, and so are names that are not UTF-8:
/// the kernel names devices in ASCII.
fn entry_names(dir: &Path) -> Option<Vec<String>> {
    let entries = fs::read_dir(dir).ok()?;
    let names = entries
        .take(MAX_DIRECTORY_ENTRIES)
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .collect();
    Some(names)
}

/// The trimmed text of the attribute file `path`: at most
/// [`MAX_ATTRIBUTE_BYTES`] bytes, invalid UTF-8 replaced. `None` when it
/// is missing, unreadable or not a regular file (sysfs attributes are).
fn read_attribute(path: &Path) -> Option<String> {
    // Non-blocking, so a FIFO or device placed where an attribute should
    // be cannot stall discovery before the type check below rejects it.
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(MAX_ATTRIBUTE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(attribute_text(&bytes))
}

/// Attribute bytes as text: invalid UTF-8 replaced, the kernel's trailing
/// newline and any surrounding white space removed.
fn attribute_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[cfg(test)]
mod tests {
    // Test fixtures fail loudly by design.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn serial_candidates_are_the_listed_prefixes_and_tty_s() {
        for name in [
            "ttyUSB0", "ttyACM12", "ttyAMA0", "ttyTHS2", "rfcomm0", "ttyS0", "ttyUSB",
        ] {
            assert!(is_serial_candidate(name), "{name}");
        }
        for name in [
            "tty0",
            "tty",
            "console",
            "ptmx",
            "ttyprintk",
            "pts",
            "ttyusb0",
            "xttyUSB0",
        ] {
            assert!(!is_serial_candidate(name), "{name}");
        }
    }

    #[test]
    fn gpio_chip_names_need_a_decimal_number() {
        for name in ["gpiochip0", "gpiochip10", "gpiochip007"] {
            assert!(is_gpio_chip_name(name), "{name}");
        }
        for name in [
            "gpiochip",
            "gpiochipX",
            "gpiochip0a",
            "gpiochip-1",
            "xgpiochip0",
            "gpio0",
        ] {
            assert!(!is_gpio_chip_name(name), "{name}");
        }
    }

    #[test]
    fn usb_ids_are_four_hex_digits_in_lower_case() {
        assert_eq!(hex_id("0403").as_deref(), Some("0403"));
        assert_eq!(hex_id("C52B").as_deref(), Some("c52b"));
        for bad in ["", "403", "04030", "04g3", "0x40", "\u{663}403"] {
            assert_eq!(hex_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn attribute_text_trims_and_replaces_invalid_utf8() {
        assert_eq!(attribute_text(b"FT232R USB UART\n"), "FT232R USB UART");
        assert_eq!(attribute_text(b"  4 \n"), "4");
        assert_eq!(attribute_text(b"Caf\xe9\n"), "Caf\u{fffd}");
        assert_eq!(attribute_text(b""), "");
    }

    #[test]
    fn attribute_reads_stop_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("product");
        fs::write(&path, "x".repeat(10_000)).unwrap();
        let text = read_attribute(&path).unwrap();
        assert_eq!(text.len() as u64, MAX_ATTRIBUTE_BYTES);
    }

    #[test]
    fn attributes_that_are_not_regular_files_are_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("idVendor");
        fs::create_dir(&sub).unwrap();
        assert_eq!(read_attribute(&sub), None);
        assert_eq!(read_attribute(&dir.path().join("missing")), None);
        // A character device is opened but not read: /dev/zero would
        // otherwise give bytes.
        assert_eq!(read_attribute(Path::new("/dev/zero")), None);
    }

    #[test]
    fn ancestor_walk_stops_at_the_sysfs_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        // USB ids above the sysfs root must not be found.
        fs::write(root.join("idVendor"), "0403\n").unwrap();
        fs::write(root.join("idProduct"), "6001\n").unwrap();
        let sys = root.join("sys");
        let device = sys.join("devices/platform/serial8250");
        fs::create_dir_all(&device).unwrap();
        assert_eq!(usb_ancestor(&sys, &device), None);
        // Within the root, the nearest one wins.
        let usb = sys.join("devices/usb1/1-1");
        let interface = usb.join("1-1:1.0");
        fs::create_dir_all(&interface).unwrap();
        fs::write(usb.join("idVendor"), "10C4\n").unwrap();
        fs::write(usb.join("idProduct"), "ea60\n").unwrap();
        assert_eq!(
            usb_ancestor(&sys, &interface),
            Some(UsbAncestor {
                vid: "10c4".into(),
                pid: "ea60".into(),
                product: None
            })
        );
    }

    #[test]
    fn ancestor_walk_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let sys = fs::canonicalize(dir.path()).unwrap();
        let top = sys.join("top");
        fs::create_dir(&top).unwrap();
        fs::write(top.join("idVendor"), "0403").unwrap();
        fs::write(top.join("idProduct"), "6001").unwrap();
        let mut deep = top.clone();
        for _ in 0..MAX_ANCESTOR_STEPS {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        // Exactly MAX_ANCESTOR_STEPS levels up is still looked at ...
        assert!(usb_ancestor(&sys, &deep).is_some());
        // ... one more is not.
        let deeper = deep.join("d");
        fs::create_dir(&deeper).unwrap();
        assert_eq!(usb_ancestor(&sys, &deeper), None);
    }

    #[test]
    fn driver_name_is_the_link_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("port");
        fs::create_dir(&device).unwrap();
        assert_eq!(driver_name(&device), None);
        std::os::unix::fs::symlink(
            "../../bus/usb-serial/drivers/ftdi_sio",
            device.join("driver"),
        )
        .unwrap();
        assert_eq!(driver_name(&device).as_deref(), Some("ftdi_sio"));
    }
}
