//! Calendar arithmetic and the time stamps the audit log writes: civil dates
//! for every `i64` instant ([`days_from_civil`], [`civil_utc`]), the
//! `YYYYMMDD-HHMMSS` local stamp of rotated and exported file names, the UTC
//! `exported_at` stamp, and finding the local zone the way the C library does
//! (`TZ`, else `/etc/localtime`) with a bounded read of the zone file.
//!
//! The zone rules (TZif data, RFC 8536, and POSIX TZ strings) are parsed and
//! evaluated by `jiff`; this module only decides which bytes to hand it. It
//! never reads the system clock (callers pass the instant), never writes and
//! never fails: when the zone cannot be loaded, local time is UTC and
//! [`LocalZone::source`] says why. Files over [`MAX_TZIF_BYTES`] are refused
//! unread.
//!
//! Deliberate limits: leap-second records (the `right/` zones) are ignored;
//! Windows has no zoneinfo database, so local time there is UTC (reported as
//! a fallback); instants beyond the years ±9999 take the offset of the
//! nearest instant within them; years outside 0..=9999 print with more
//! digits or a sign.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::config::{SmallFileError, read_small_file};

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

/// A broken-down time: a proleptic Gregorian date and a time of day.
/// `year` is astronomical (0 is 1 BC); the other fields are in their usual
/// ranges, `second` 0..=59 (Unix time has no leap seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Civil {
    pub year: i64,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
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
/// digits (the export manifest's `exported_at`; readers accept it with or
/// without the fraction, so the fixed width is the simpler choice).
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

/// `YYYYMMDD-HHMMSS` in local time (rotated audit file names, the default
/// export archive name).
pub fn local_stamp(unix_seconds: i64) -> String {
    local_zone().stamp(unix_seconds)
}

/// Why a zone could not be loaded: the file is unreadable, not a regular
/// file (directory, FIFO, …), over [`MAX_TZIF_BYTES`], named with `..`, not
/// TZif data (the text says why), or the string is no POSIX TZ string.
#[derive(Debug)]
#[non_exhaustive]
pub enum ZoneError {
    Io(io::Error),
    NotAFile,
    TooLarge,
    BadName,
    Malformed(String),
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

impl std::error::Error for ZoneError {}

/// A time zone: how to get from an instant to its UTC offset.
#[derive(Debug, Clone)]
pub struct LocalZone {
    rules: TimeZone,
    source: String,
    utc_fallback: bool,
}

impl LocalZone {
    fn named(rules: TimeZone, source: String) -> Self {
        Self {
            rules,
            source,
            utc_fallback: false,
        }
    }

    fn fallback(reason: String) -> Self {
        Self {
            rules: TimeZone::UTC,
            source: format!("using UTC: {reason}"),
            utc_fallback: true,
        }
    }

    /// The zone named by this process's `TZ`, else `/etc/localtime`.
    pub fn from_env() -> Self {
        Self::from_tz_var(std::env::var_os("TZ").as_deref())
    }

    /// The zone a given value of `TZ` selects (`None`: unset), resolved as
    /// the C library does, minus locale and `TZDIR` niceties: unset →
    /// `/etc/localtime`; empty, `:`, `UTC` or `UTC0` → UTC; `:/path` or
    /// `/path` → that TZif file; `:Name` or `Name` →
    /// `/usr/share/zoneinfo/Name`; otherwise (no such file, and no leading
    /// `:`) → the value as a POSIX TZ string (`CET-1CEST,M3.5.0,M10.5.0/3`).
    ///
    /// Never fails: anything that does not work out is UTC with
    /// [`is_utc_fallback`](Self::is_utc_fallback) set.
    pub fn from_tz_var(tz: Option<&OsStr>) -> Self {
        let Some(tz) = tz else {
            return Self::from_file(Path::new(LOCALTIME_PATH))
                .unwrap_or_else(|e| Self::fallback(format!("{LOCALTIME_PATH} {e}")));
        };
        let Some(value) = tz.to_str() else {
            return Self::fallback("TZ is not valid UTF-8".to_owned());
        };
        let (explicit_file, name) = match value.strip_prefix(':') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        if name.is_empty() || name == "UTC" || name == "UTC0" {
            return Self::named(TimeZone::UTC, format!("TZ={value:?} (UTC)"));
        }
        let file_error = match resolve_zone_name(name) {
            Ok(path) => match Self::from_file(&path) {
                Ok(zone) => {
                    return Self::named(zone.rules, format!("TZ={value:?} ({})", path.display()));
                }
                Err(e) => format!("{} {e}", path.display()),
            },
            Err(e) => e.to_string(),
        };
        // Like the C library: a value that names no file may be a rule
        // string; a leading ':' or '/' says it is a file name.
        if !explicit_file && !name.starts_with('/') {
            if let Ok(zone) = Self::from_posix_tz(name) {
                return Self::named(zone.rules, format!("TZ={value:?} (POSIX TZ string)"));
            }
        }
        Self::fallback(format!("TZ={value:?}: {file_error}"))
    }

    /// A zone from a TZif file, read with a size bound.
    pub fn from_file(path: &Path) -> Result<Self, ZoneError> {
        let bytes = read_small_file(path, MAX_TZIF_BYTES).map_err(|e| match e {
            SmallFileError::TooLarge(_) => ZoneError::TooLarge,
            // The one refusal `open_regular_file` makes itself.
            SmallFileError::Io(e) if e.kind() == io::ErrorKind::InvalidInput => ZoneError::NotAFile,
            SmallFileError::Io(e) => ZoneError::Io(e),
        })?;
        Self::from_tzif(&bytes, &path.display().to_string())
    }

    /// A zone from TZif bytes (RFC 8536, versions 1 to 4); `source` is what
    /// [`source`](Self::source) reports.
    pub fn from_tzif(bytes: &[u8], source: &str) -> Result<Self, ZoneError> {
        let rules =
            TimeZone::tzif(source, bytes).map_err(|e| ZoneError::Malformed(e.to_string()))?;
        Ok(Self::named(rules, source.to_owned()))
    }

    /// A zone from a POSIX TZ string such as `EST5EDT,M3.2.0,M11.1.0`.
    /// Daylight time named without rules (`EST5EDT`) follows the tz code's
    /// default, the United States rules since 2007.
    pub fn from_posix_tz(spec: &str) -> Result<Self, ZoneError> {
        let rules = TimeZone::posix(spec)
            .or_else(|e| match spec.contains(',') {
                true => Err(e),
                false => TimeZone::posix(&format!("{spec},M3.2.0,M11.1.0")),
            })
            .map_err(|_| ZoneError::BadPosixTz)?;
        Ok(Self::named(rules, spec.to_owned()))
    }

    /// The UTC offset, in seconds east of UTC, in effect at an instant.
    pub fn offset_at(&self, unix_seconds: i64) -> i32 {
        // The rules are evaluated within the years jiff represents; beyond
        // them the offset of the nearest representable instant stands.
        let clamped = unix_seconds.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
        Timestamp::from_second(clamped)
            .map(|t| self.rules.to_offset(t).seconds())
            .unwrap_or(0)
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
