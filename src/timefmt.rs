//! Calendar arithmetic and the time stamps the audit log writes, without libc
//! and without date crates.
//!
//! This module owns:
//!
//! * the proleptic Gregorian conversion between days since 1970-01-01 and
//!   civil dates ([`days_from_civil`], [`civil_utc`]), valid for negative
//!   instants too;
//! * the two stamp formats of AUDIT.md: `YYYYMMDD-HHMMSS` in local time for
//!   rotated file names and export archive names (§9.2, §11.4), and
//!   `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` in UTC for `exported_at` (§11.4);
//! * the local UTC offset, found the way the C library finds it (`TZ`, else
//!   `/etc/localtime`) and read from the TZif database (RFC 8536) or from a
//!   POSIX TZ string.
//!
//! It never reads the system clock (callers pass the instant, which keeps
//! everything here testable), never calls into libc, never writes anything
//! and never fails: when the zone cannot be loaded, local time is UTC and
//! [`LocalZone::is_utc_fallback`] / [`LocalZone::source`] say why, so the
//! caller can log it once. Malformed zone data is an error value, never a
//! panic; files larger than [`MAX_TZIF_BYTES`] are refused unread.
//!
//! Known limits, all deliberate: leap-second records (the `right/` zones) are
//! skipped, so such zones are off by the accumulated leap seconds; there is
//! no zoneinfo database on Windows, so local time there is UTC (reported as a
//! fallback); years outside 0..=9999 print with more digits or a sign.

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// Largest zone file read. Real TZif files are a few KiB; the bound keeps a
/// hostile `TZ=/some/huge/file` from costing memory.
pub const MAX_TZIF_BYTES: u64 = 1 << 20;

/// Where zone names (`TZ=Europe/Berlin`) are resolved.
pub const ZONEINFO_DIR: &str = "/usr/share/zoneinfo";

/// The system zone when `TZ` is unset.
pub const LOCALTIME_PATH: &str = "/etc/localtime";

const SECS_PER_DAY: i64 = 86_400;
const MICROS_PER_SEC: i64 = 1_000_000;
/// 1970-01-01 counted from 0000-03-01, the origin of the civil algorithms.
const EPOCH_SHIFT_DAYS: i64 = 719_468;
const DAYS_PER_400_YEARS: i64 = 146_097;

/// UTC offsets accepted from zone data: RFC 8536 §3.2 says `utoff` should be
/// more than -25 hours and less than 26 hours. Anything outside is treated
/// as malformed, which also keeps all offset arithmetic far from overflow.
const MIN_UTOFF: i32 = -89_999;
const MAX_UTOFF: i32 = 93_599;

// ---- civil dates -------------------------------------------------------------

/// A broken-down time: a proleptic Gregorian date and a time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Civil {
    /// Astronomical year numbering: year 0 is 1 BC, -1 is 2 BC.
    pub year: i64,
    /// 1..=12.
    pub month: u8,
    /// 1..=31.
    pub day: u8,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=59 (there are no leap seconds in Unix time).
    pub second: u8,
    /// 0..=999_999.
    pub micros: u32,
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
///
/// `month` should be 1..=12 and `day` 1..=31; other values give a
/// meaningless (but never panicking) result. The arithmetic is done in
/// `i128` and saturated, so every `year` is accepted.
pub fn days_from_civil(year: i64, month: u8, day: u8) -> i64 {
    // Count years from March so that the leap day is the last day of the
    // "year" and month lengths repeat in a 5-month pattern (153 days).
    let m = i128::from(month);
    let y = i128::from(year) - i128::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i128::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * i128::from(DAYS_PER_400_YEARS) + doe - i128::from(EPOCH_SHIFT_DAYS);
    i64::try_from(days).unwrap_or(if days < 0 { i64::MIN } else { i64::MAX })
}

/// The inverse of [`days_from_civil`] for `days` derived from an `i64`
/// second count (|days| < 2^47), where no step can overflow.
fn civil_from_days(days: i64) -> (i64, u8, u8) {
    let z = days + EPOCH_SHIFT_DAYS;
    let era = z.div_euclid(DAYS_PER_400_YEARS);
    let doe = z.rem_euclid(DAYS_PER_400_YEARS); // 0..=146_096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1
    let mp = (5 * doy + 2) / 153; // 0..=11, March = 0
    let day = doy - (153 * mp + 2) / 5 + 1; // 1..=31
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // 1..=12
    let year = yoe + era * 400 + i64::from(month <= 2);
    // The ranges noted above make these conversions lossless.
    (year, month as u8, day as u8)
}

/// Day of the week, 0 = Sunday. 1970-01-01 was a Thursday.
fn weekday(days: i64) -> i64 {
    (days + 4).rem_euclid(7)
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn civil_from_seconds(secs: i64, micros: u32) -> Civil {
    let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let sod = secs.rem_euclid(SECS_PER_DAY); // 0..=86_399
    Civil {
        year,
        month,
        day,
        hour: (sod / 3600) as u8,
        minute: (sod % 3600 / 60) as u8,
        second: (sod % 60) as u8,
        micros,
    }
}

/// The UTC civil time of an instant given in microseconds since the epoch.
/// Instants before 1970 work too: `-1` is 1969-12-31T23:59:59.999999.
pub fn civil_utc(unix_micros: i64) -> Civil {
    let secs = unix_micros.div_euclid(MICROS_PER_SEC);
    // rem_euclid is in 0..1_000_000, so the conversion is lossless.
    let micros = unix_micros.rem_euclid(MICROS_PER_SEC) as u32;
    civil_from_seconds(secs, micros)
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` in UTC, always with six fraction
/// digits (AUDIT.md §11.4 `exported_at`; readers accept it with or without
/// the fraction, so the fixed width is the simpler choice).
pub fn utc_iso_micros(unix_micros: i64) -> String {
    let c = civil_utc(unix_micros);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.micros
    )
}

/// `YYYYMMDD-HHMMSS` of a civil time (the fraction is dropped).
pub fn compact_stamp(c: &Civil) -> String {
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

// ---- the process-wide local zone ---------------------------------------------

/// The local zone of this process, loaded on first use from `TZ` /
/// `/etc/localtime` and kept for the life of the process (the C library
/// caches it too; a daemon does not change zones under its own feet).
pub fn local_zone() -> &'static LocalZone {
    static ZONE: OnceLock<LocalZone> = OnceLock::new();
    ZONE.get_or_init(LocalZone::from_env)
}

/// The local UTC offset, in seconds east of UTC, at an instant.
pub fn utc_offset_seconds(unix_seconds: i64) -> i32 {
    local_zone().offset_at(unix_seconds)
}

/// One line saying where local time comes from, for a log line; see
/// [`LocalZone::source`]. Starts with `using UTC:` when the zone could not
/// be loaded.
pub fn local_time_source() -> &'static str {
    local_zone().source()
}

/// `YYYYMMDD-HHMMSS` in local time (AUDIT.md §9.2 rotated names, §11.4
/// default export name).
pub fn local_stamp(unix_seconds: i64) -> String {
    local_zone().stamp(unix_seconds)
}

// ---- zones -------------------------------------------------------------------

/// Why a zone could not be loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum ZoneError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The path names a directory, device, FIFO, ….
    NotAFile,
    /// The file is larger than [`MAX_TZIF_BYTES`].
    TooLarge,
    /// The zone name tries to leave the zoneinfo directory (`..`).
    BadName,
    /// The bytes are not valid TZif data.
    Malformed(&'static str),
    /// The string is not a POSIX TZ string this module understands.
    BadPosixTz,
}

impl fmt::Display for ZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "unreadable: {e}"),
            Self::NotAFile => f.write_str("not a regular file"),
            Self::TooLarge => write!(f, "larger than {MAX_TZIF_BYTES} bytes"),
            Self::BadName => f.write_str("zone name contains '..'"),
            Self::Malformed(what) => write!(f, "malformed TZif data: {what}"),
            Self::BadPosixTz => f.write_str("not a valid POSIX TZ string"),
        }
    }
}

impl std::error::Error for ZoneError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A time zone: how to get from an instant to its UTC offset.
#[derive(Debug, Clone)]
pub struct LocalZone {
    rules: Rules,
    source: String,
    utc_fallback: bool,
}

#[derive(Debug, Clone)]
enum Rules {
    Utc,
    Tzif(Tzif),
    Posix(PosixTz),
}

impl LocalZone {
    /// Plain UTC, on purpose (not a fallback).
    pub fn utc() -> Self {
        Self {
            rules: Rules::Utc,
            source: "UTC".to_owned(),
            utc_fallback: false,
        }
    }

    fn fallback(reason: String) -> Self {
        Self {
            rules: Rules::Utc,
            source: format!("using UTC: {reason}"),
            utc_fallback: true,
        }
    }

    /// The zone named by this process's `TZ`, else `/etc/localtime`.
    pub fn from_env() -> Self {
        Self::from_tz_var(std::env::var_os("TZ").as_deref())
    }

    /// The zone a given value of `TZ` selects (`None`: unset), resolved as
    /// the C library does, minus locale and `TZDIR` niceties:
    ///
    /// * unset → `/etc/localtime`;
    /// * empty, `:`, `UTC` or `UTC0` → UTC;
    /// * `:/path` or `/path` → that TZif file;
    /// * `:Name` or `Name` → `/usr/share/zoneinfo/Name`;
    /// * otherwise (no such file, and no leading `:`) → the value as a POSIX
    ///   TZ string such as `CET-1CEST,M3.5.0,M10.5.0/3`.
    ///
    /// Never fails: anything that does not work out is UTC with
    /// [`is_utc_fallback`](Self::is_utc_fallback) set.
    pub fn from_tz_var(tz: Option<&OsStr>) -> Self {
        let Some(tz) = tz else {
            return match Self::from_file(Path::new(LOCALTIME_PATH)) {
                Ok(zone) => zone,
                Err(e) => Self::fallback(format!("{LOCALTIME_PATH} {e}")),
            };
        };
        let Some(value) = tz.to_str() else {
            return Self::fallback("TZ is not valid UTF-8".to_owned());
        };
        let (explicit_file, name) = match value.strip_prefix(':') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        if name.is_empty() || name == "UTC" || name == "UTC0" {
            return Self {
                rules: Rules::Utc,
                source: format!("TZ={value:?} (UTC)"),
                utc_fallback: false,
            };
        }
        let absolute = name.starts_with('/');
        let file_error = match resolve_zone_name(name) {
            Ok(path) => match Self::from_file(&path) {
                Ok(zone) => {
                    return Self {
                        source: format!("TZ={value:?} ({})", path.display()),
                        ..zone
                    };
                }
                Err(e) => format!("{} {e}", path.display()),
            },
            Err(e) => e.to_string(),
        };
        // Like the C library: a value that names no file may be a rule
        // string; a leading ':' or '/' says it is a file name.
        if !explicit_file && !absolute {
            if let Ok(zone) = Self::from_posix_tz(name) {
                return Self {
                    source: format!("TZ={value:?} (POSIX TZ string)"),
                    ..zone
                };
            }
        }
        Self::fallback(format!("TZ={value:?}: {file_error}"))
    }

    /// A zone from a TZif file, read with a size bound.
    pub fn from_file(path: &Path) -> Result<Self, ZoneError> {
        let bytes = read_bounded(path)?;
        Self::from_tzif(&bytes, &path.display().to_string())
    }

    /// A zone from TZif bytes (RFC 8536, versions 1 to 4); `source` is what
    /// [`source`](Self::source) reports.
    pub fn from_tzif(bytes: &[u8], source: &str) -> Result<Self, ZoneError> {
        Ok(Self {
            rules: Rules::Tzif(Tzif::parse(bytes)?),
            source: source.to_owned(),
            utc_fallback: false,
        })
    }

    /// A zone from a POSIX TZ string such as `EST5EDT,M3.2.0,M11.1.0`.
    pub fn from_posix_tz(spec: &str) -> Result<Self, ZoneError> {
        let rules = PosixTz::parse(spec).ok_or(ZoneError::BadPosixTz)?;
        Ok(Self {
            rules: Rules::Posix(rules),
            source: spec.to_owned(),
            utc_fallback: false,
        })
    }

    /// The UTC offset, in seconds east of UTC, in effect at an instant.
    pub fn offset_at(&self, unix_seconds: i64) -> i32 {
        match &self.rules {
            Rules::Utc => 0,
            Rules::Tzif(tzif) => tzif.offset_at(unix_seconds),
            Rules::Posix(posix) => posix.offset_at(unix_seconds),
        }
    }

    /// The local civil time of an instant (seconds since the epoch).
    pub fn civil(&self, unix_seconds: i64) -> Civil {
        let offset = i64::from(self.offset_at(unix_seconds));
        civil_from_seconds(unix_seconds.saturating_add(offset), 0)
    }

    /// `YYYYMMDD-HHMMSS` of an instant in this zone.
    pub fn stamp(&self, unix_seconds: i64) -> String {
        compact_stamp(&self.civil(unix_seconds))
    }

    /// Where the rules came from (`/etc/localtime`,
    /// `TZ="Europe/Berlin" (/usr/share/zoneinfo/Europe/Berlin)`, …), or for
    /// a fallback, `using UTC: <reason>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the wanted zone could not be loaded and UTC stands in.
    pub fn is_utc_fallback(&self) -> bool {
        self.utc_fallback
    }
}

/// The file a `TZ` zone name (without its leading ':') refers to.
fn resolve_zone_name(name: &str) -> Result<PathBuf, ZoneError> {
    let path = Path::new(name);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    // A relative name must stay inside the zoneinfo directory.
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ZoneError::BadName);
    }
    Ok(Path::new(ZONEINFO_DIR).join(path))
}

/// Reads a whole file of at most [`MAX_TZIF_BYTES`] bytes.
fn read_bounded(path: &Path) -> Result<Vec<u8>, ZoneError> {
    // Check the type before opening: opening a FIFO would block until a
    // writer shows up.
    let meta = std::fs::metadata(path).map_err(ZoneError::Io)?;
    if !meta.is_file() {
        return Err(ZoneError::NotAFile);
    }
    if meta.len() > MAX_TZIF_BYTES {
        return Err(ZoneError::TooLarge);
    }
    let file = File::open(path).map_err(ZoneError::Io)?;
    let mut bytes = Vec::new();
    // The file may have grown since the stat: read one byte more than
    // allowed to notice.
    file.take(MAX_TZIF_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ZoneError::Io)?;
    if bytes.len() as u64 > MAX_TZIF_BYTES {
        return Err(ZoneError::TooLarge);
    }
    Ok(bytes)
}

// ---- TZif (RFC 8536) ---------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LocalTimeType {
    utoff: i32,
    is_dst: bool,
}

#[derive(Debug, Clone)]
struct Tzif {
    /// Strictly ascending transition instants.
    transitions: Vec<i64>,
    /// For each transition, an index into `types` (checked at parse time).
    transition_types: Vec<u8>,
    /// Never empty.
    types: Vec<LocalTimeType>,
    /// The type in effect before the first transition.
    initial_type: usize,
    /// Rules for instants after the last transition (v2+ footer).
    footer: Option<PosixTz>,
}

#[derive(Debug, Clone, Copy)]
struct Header {
    version: u8,
    isutcnt: usize,
    isstdcnt: usize,
    leapcnt: usize,
    timecnt: usize,
    typecnt: usize,
    charcnt: usize,
}

impl Header {
    /// Bytes of the data block that follows this header; `None` on
    /// overflow (which no file under the size bound can have).
    fn block_len(&self, time_size: usize) -> Option<usize> {
        let parts = [
            self.timecnt.checked_mul(time_size)?,
            self.timecnt,
            self.typecnt.checked_mul(6)?,
            self.charcnt,
            self.leapcnt.checked_mul(time_size + 4)?,
            self.isstdcnt,
            self.isutcnt,
        ];
        parts.iter().try_fold(0usize, |sum, &p| sum.checked_add(p))
    }
}

/// A cursor over untrusted bytes: every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ZoneError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(ZoneError::Malformed("truncated"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ZoneError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, ZoneError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, ZoneError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, ZoneError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, ZoneError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn header(&mut self) -> Result<Header, ZoneError> {
        if self.take(4)? != b"TZif" {
            return Err(ZoneError::Malformed("bad magic"));
        }
        let version = self.u8()?;
        self.take(15)?; // reserved
        // u32 always fits usize on the platforms this crate supports; a
        // count that did not would fail the length check anyway.
        let mut count = || -> Result<usize, ZoneError> {
            usize::try_from(self.u32()?).map_err(|_| ZoneError::Malformed("count too large"))
        };
        Ok(Header {
            version,
            isutcnt: count()?,
            isstdcnt: count()?,
            leapcnt: count()?,
            timecnt: count()?,
            typecnt: count()?,
            charcnt: count()?,
        })
    }

    fn skip_block(&mut self, header: &Header, time_size: usize) -> Result<(), ZoneError> {
        let len = header
            .block_len(time_size)
            .ok_or(ZoneError::Malformed("counts overflow"))?;
        self.take(len)?;
        Ok(())
    }
}

impl Tzif {
    fn parse(bytes: &[u8]) -> Result<Self, ZoneError> {
        let mut r = Reader { bytes, pos: 0 };
        let v1 = r.header()?;
        if v1.version == 0 {
            return Self::data_block(&mut r, &v1, 4);
        }
        // Version 2 and later repeat everything with 64-bit times and add a
        // footer; the 32-bit block is skipped unchecked (zic's "slim" output
        // leaves it nearly empty).
        r.skip_block(&v1, 4)?;
        let v2 = r.header()?;
        let mut tzif = Self::data_block(&mut r, &v2, 8)?;
        tzif.footer = footer(&mut r);
        Ok(tzif)
    }

    fn data_block(r: &mut Reader<'_>, h: &Header, time_size: usize) -> Result<Self, ZoneError> {
        // Check the whole block is present before allocating anything, so
        // forged counts cannot make us reserve more than the file's size.
        let len = h
            .block_len(time_size)
            .ok_or(ZoneError::Malformed("counts overflow"))?;
        if len > r.remaining() {
            return Err(ZoneError::Malformed("truncated"));
        }
        if h.typecnt == 0 {
            return Err(ZoneError::Malformed("no local time types"));
        }
        if h.typecnt > 256 {
            return Err(ZoneError::Malformed("more than 256 local time types"));
        }

        let mut transitions = Vec::with_capacity(h.timecnt);
        for _ in 0..h.timecnt {
            let t = if time_size == 4 {
                i64::from(r.i32()?)
            } else {
                r.i64()?
            };
            if transitions.last().is_some_and(|&prev| prev >= t) {
                return Err(ZoneError::Malformed("transitions not ascending"));
            }
            transitions.push(t);
        }
        let transition_types = r.take(h.timecnt)?.to_vec();
        if transition_types
            .iter()
            .any(|&i| usize::from(i) >= h.typecnt)
        {
            return Err(ZoneError::Malformed("transition type index out of range"));
        }
        let mut types = Vec::with_capacity(h.typecnt);
        for _ in 0..h.typecnt {
            let utoff = r.i32()?;
            let is_dst = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(ZoneError::Malformed("isdst is not 0 or 1")),
            };
            let _designation_index = r.u8()?;
            if !(MIN_UTOFF..=MAX_UTOFF).contains(&utoff) {
                return Err(ZoneError::Malformed("UTC offset out of range"));
            }
            types.push(LocalTimeType { utoff, is_dst });
        }
        // Designations, leap seconds and the standard/UT indicators do not
        // affect the offset.
        r.take(h.charcnt)?;
        r.take(h.leapcnt * (time_size + 4))?;
        r.take(h.isstdcnt)?;
        r.take(h.isutcnt)?;

        let initial_type = initial_type(&types);
        Ok(Self {
            transitions,
            transition_types,
            types,
            initial_type,
            footer: None,
        })
    }

    fn type_offset(&self, index: usize) -> i32 {
        // Indices are checked at parse time; the fallback is unreachable.
        self.types.get(index).map_or(0, |t| t.utoff)
    }

    fn offset_at(&self, t: i64) -> i32 {
        let last = self.transitions.last().copied();
        // After the last transition (or with none at all) the footer rules,
        // when there are usable ones, describe local time (RFC 8536 §3.3).
        if last.is_none_or(|last| t > last) {
            if let Some(footer) = &self.footer {
                return footer.offset_at(t);
            }
        }
        // Number of transitions at or before t: a transition takes effect
        // at its own instant.
        let passed = self.transitions.partition_point(|&x| x <= t);
        match passed.checked_sub(1) {
            None => self.type_offset(self.initial_type),
            Some(i) => self.type_offset(usize::from(self.transition_types[i])),
        }
    }
}

/// The type for instants before the first transition. RFC 8536 §3.2 says
/// type 0, and zic always puts the right one there; for files that put a
/// DST type first, fall back to the first standard-time type, as the tz
/// project's `localtime.c` has long done.
fn initial_type(types: &[LocalTimeType]) -> usize {
    if types.first().is_some_and(|t| !t.is_dst) {
        return 0;
    }
    types.iter().position(|t| !t.is_dst).unwrap_or(0)
}

/// The v2+ footer: `\n<POSIX TZ string>\n`. A missing, empty or unparsable
/// footer is no error: the transitions are still good, and after the last
/// one its type stays in effect.
fn footer(r: &mut Reader<'_>) -> Option<PosixTz> {
    let rest = r.take(r.remaining()).ok()?;
    let body = rest.strip_prefix(b"\n")?;
    let end = body.iter().position(|&b| b == b'\n')?;
    let spec = std::str::from_utf8(&body[..end]).ok()?;
    PosixTz::parse(spec)
}

// ---- POSIX TZ strings ----------------------------------------------------------

/// `std offset [dst [offset] [,start[/time],end[/time]]]` (POSIX, with the
/// RFC 8536 §3.3.1 extensions: hours up to 167 and negative rule times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PosixTz {
    /// Seconds east of UTC (POSIX writes west-positive; stored negated).
    std_utoff: i32,
    dst: Option<DstRules>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DstRules {
    dst_utoff: i32,
    start: RuleDate,
    /// Seconds after local midnight (standard time) of `start`.
    start_time: i32,
    end: RuleDate,
    /// Seconds after local midnight (daylight time) of `end`.
    end_time: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleDate {
    /// `Jn`: day 1..=365, February 29 never counted.
    JulianNoLeap(u16),
    /// `n`: day 0..=365, February 29 counted in leap years.
    ZeroBased(u16),
    /// `Mm.w.d`: weekday `d` (0 = Sunday) of week `w` (5 = last) of month `m`.
    MonthWeekDay { month: u8, week: u8, weekday: u8 },
}

/// 400 Gregorian years, in seconds: the calendar, weekdays included, repeats
/// with this period.
const CYCLE_SECS: i64 = DAYS_PER_400_YEARS * SECS_PER_DAY;

impl PosixTz {
    fn parse(spec: &str) -> Option<Self> {
        let mut p = TzParser {
            bytes: spec.as_bytes(),
            pos: 0,
        };
        p.name()?;
        let std_utoff = -p.hms(24)?;
        if p.at_end() {
            return Some(Self {
                std_utoff,
                dst: None,
            });
        }
        p.name()?;
        let dst_utoff = if p.at_end() || p.peek() == Some(b',') {
            // POSIX: the default daylight offset is one hour ahead.
            std_utoff + 3600
        } else {
            -p.hms(24)?
        };
        let (start, start_time, end, end_time) = if p.at_end() {
            // No rules given: the default of the tz code and the C library
            // (US rules since 2007).
            (
                RuleDate::MonthWeekDay {
                    month: 3,
                    week: 2,
                    weekday: 0,
                },
                7200,
                RuleDate::MonthWeekDay {
                    month: 11,
                    week: 1,
                    weekday: 0,
                },
                7200,
            )
        } else {
            p.expect(b',')?;
            let (start, start_time) = p.rule()?;
            p.expect(b',')?;
            let (end, end_time) = p.rule()?;
            (start, start_time, end, end_time)
        };
        if !p.at_end() {
            return None;
        }
        for utoff in [std_utoff, dst_utoff] {
            if !(MIN_UTOFF..=MAX_UTOFF).contains(&utoff) {
                return None;
            }
        }
        Some(Self {
            std_utoff,
            dst: Some(DstRules {
                dst_utoff,
                start,
                start_time,
                end,
                end_time,
            }),
        })
    }

    fn offset_at(&self, t: i64) -> i32 {
        let Some(rules) = &self.dst else {
            return self.std_utoff;
        };
        // The rules give the same answer for t and t + k·400 years; folding
        // t into one cycle keeps every step below far from overflow.
        let t = t.rem_euclid(CYCLE_SECS);
        let local_std = t + i64::from(self.std_utoff);
        let (year, _, _) = civil_from_days(local_std.div_euclid(SECS_PER_DAY));
        // Each change happens at a local wall-clock time, read on the clock
        // in effect just before it.
        let start = rule_day(year, rules.start) * SECS_PER_DAY + i64::from(rules.start_time)
            - i64::from(self.std_utoff);
        let end = rule_day(year, rules.end) * SECS_PER_DAY + i64::from(rules.end_time)
            - i64::from(rules.dst_utoff);
        let in_dst = if start <= end {
            // Northern hemisphere: daylight time inside the year.
            start <= t && t < end
        } else {
            // Southern hemisphere: daylight time across the new year.
            !(end <= t && t < start)
        };
        if in_dst {
            rules.dst_utoff
        } else {
            self.std_utoff
        }
    }
}

/// Days since the epoch of the local date a rule names in `year`.
fn rule_day(year: i64, date: RuleDate) -> i64 {
    let jan1 = days_from_civil(year, 1, 1);
    match date {
        RuleDate::JulianNoLeap(n) => {
            let n = i64::from(n);
            jan1 + n - 1 + i64::from(is_leap_year(year) && n >= 60)
        }
        RuleDate::ZeroBased(n) => jan1 + i64::from(n),
        RuleDate::MonthWeekDay {
            month,
            week,
            weekday: wd,
        } => {
            let first = days_from_civil(year, month, 1);
            let next_month = if month == 12 {
                days_from_civil(year + 1, 1, 1)
            } else {
                days_from_civil(year, month + 1, 1)
            };
            let first_match = first + (i64::from(wd) - weekday(first)).rem_euclid(7);
            let mut day = first_match + 7 * (i64::from(week) - 1);
            // Week 5 means "the last one", which may be the fourth.
            while day >= next_month {
                day -= 7;
            }
            day
        }
    }
}

struct TzParser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl TzParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    /// A zone abbreviation: three or more letters, or `<...>` with letters,
    /// digits, '+' and '-' (for names like `<+1030>`).
    fn name(&mut self) -> Option<()> {
        let quoted = self.expect(b'<').is_some();
        let start = self.pos;
        while let Some(b) = self.peek() {
            let ok = if quoted {
                b.is_ascii_alphanumeric() || b == b'+' || b == b'-'
            } else {
                b.is_ascii_alphabetic()
            };
            if !ok {
                break;
            }
            self.pos += 1;
        }
        let len = self.pos - start;
        if quoted {
            self.expect(b'>')?;
        }
        (len >= 3).then_some(())
    }

    /// Up to `max_digits` decimal digits (at least one), as a number.
    fn number(&mut self, max_digits: usize) -> Option<i32> {
        let start = self.pos;
        let mut n: i32 = 0;
        while let Some(b) = self.peek().filter(u8::is_ascii_digit) {
            if self.pos - start == max_digits {
                return None;
            }
            n = n * 10 + i32::from(b - b'0');
            self.pos += 1;
        }
        (self.pos > start).then_some(n)
    }

    /// `[+-]hh[:mm[:ss]]` in seconds, hours up to `max_hours`.
    fn hms(&mut self, max_hours: i32) -> Option<i32> {
        let sign = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                -1
            }
            Some(b'+') => {
                self.pos += 1;
                1
            }
            _ => 1,
        };
        let hours = self.number(3)?;
        if hours > max_hours {
            return None;
        }
        let mut secs = hours * 3600;
        for unit in [60, 1] {
            if self.expect(b':').is_none() {
                break;
            }
            let n = self.number(2)?;
            if n > 59 {
                return None;
            }
            secs += n * unit;
        }
        Some(sign * secs)
    }

    /// `date[/time]`, the time defaulting to 02:00.
    fn rule(&mut self) -> Option<(RuleDate, i32)> {
        let date = match self.peek()? {
            b'J' => {
                self.pos += 1;
                let n = self.number(3)?;
                if !(1..=365).contains(&n) {
                    return None;
                }
                RuleDate::JulianNoLeap(u16::try_from(n).ok()?)
            }
            b'M' => {
                self.pos += 1;
                let month = self.number(2)?;
                self.expect(b'.')?;
                let week = self.number(1)?;
                self.expect(b'.')?;
                let weekday = self.number(1)?;
                if !(1..=12).contains(&month) || !(1..=5).contains(&week) || weekday > 6 {
                    return None;
                }
                RuleDate::MonthWeekDay {
                    month: u8::try_from(month).ok()?,
                    week: u8::try_from(week).ok()?,
                    weekday: u8::try_from(weekday).ok()?,
                }
            }
            b'0'..=b'9' => {
                let n = self.number(3)?;
                if n > 365 {
                    return None;
                }
                RuleDate::ZeroBased(u16::try_from(n).ok()?)
            }
            _ => return None,
        };
        let time = if self.expect(b'/').is_some() {
            // RFC 8536 §3.3.1: rule times may be negative and up to 167 h.
            self.hms(167)?
        } else {
            7200
        };
        Some((date, time))
    }
}
