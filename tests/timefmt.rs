//! Civil-date arithmetic, the audit log's two stamp formats (AUDIT.md §9.2,
//! §11.4) and the TZif / POSIX TZ zone reader behind local time.
//!
//! The parser is tested deterministically on TZif files built byte by byte
//! here; the tests against the machine's zoneinfo files and the `date`
//! command are additional and skip, saying why, where those are missing.

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use autogpt_shim::timefmt::{
    self, Civil, LocalZone, MAX_TZIF_BYTES, ZONEINFO_DIR, ZoneError, civil_utc, compact_stamp,
    days_from_civil, utc_iso_micros,
};

fn civil(year: i64, month: u8, day: u8, hour: u8, minute: u8, second: u8, micros: u32) -> Civil {
    Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
        micros,
    }
}

// ---- civil dates and UTC formatting ------------------------------------------

#[test]
fn epoch_and_the_microsecond_before_it() {
    assert_eq!(civil_utc(0), civil(1970, 1, 1, 0, 0, 0, 0));
    assert_eq!(civil_utc(-1), civil(1969, 12, 31, 23, 59, 59, 999_999));
    assert_eq!(utc_iso_micros(0), "1970-01-01T00:00:00.000000+00:00");
    assert_eq!(utc_iso_micros(-1), "1969-12-31T23:59:59.999999+00:00");
}

#[test]
fn audit_export_vector_of_section_12_6() {
    // 2024-04-05T19:41:20.000123Z.
    let micros = 1_712_346_080 * 1_000_000 + 123;
    assert_eq!(civil_utc(micros), civil(2024, 4, 5, 19, 41, 20, 123));
    assert_eq!(utc_iso_micros(micros), "2024-04-05T19:41:20.000123+00:00");
    assert_eq!(compact_stamp(&civil_utc(micros)), "20240405-194120");
}

#[test]
fn known_instants() {
    // (seconds since the epoch, as `date -u -d ... +%s` gives them)
    let cases: [(i64, &str); 10] = [
        (1_709_210_096, "2024-02-29T12:34:56"),
        (1_709_251_199, "2024-02-29T23:59:59"),
        (1_709_251_200, "2024-03-01T00:00:00"),
        (951_782_400, "2000-02-29T00:00:00"),
        (2_147_483_647, "2038-01-19T03:14:07"),
        (2_147_483_648, "2038-01-19T03:14:08"),
        (4_107_542_400, "2100-03-01T00:00:00"),
        (253_402_300_799, "9999-12-31T23:59:59"),
        (-14_182_940, "1969-07-20T20:17:40"),
        (-2_208_988_800, "1900-01-01T00:00:00"),
    ];
    for (secs, want) in cases {
        let got = utc_iso_micros(secs * 1_000_000);
        assert_eq!(got, format!("{want}.000000+00:00"), "{secs}");
    }
    assert_eq!(
        civil_utc(-62_135_596_800 * 1_000_000),
        civil(1, 1, 1, 0, 0, 0, 0)
    );
    // 2100 is not a leap year: February has 28 days.
    assert_eq!(civil_utc(4_107_456_000 * 1_000_000).day, 28);
}

#[test]
fn extreme_micros_do_not_panic() {
    for micros in [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1] {
        let c = civil_utc(micros);
        assert!((1..=12).contains(&c.month) && (1..=31).contains(&c.day));
        assert!(c.micros < 1_000_000);
        let _ = utc_iso_micros(micros);
    }
    // i64::MAX microseconds is in the year 294247.
    assert_eq!(civil_utc(i64::MAX).year, 294_247);
    assert_eq!(civil_utc(i64::MIN).year, -290_308);
}

#[test]
fn days_round_trip_and_advance_one_calendar_day_at_a_time() {
    // Walk day by day from 1600-01-01 to 2500-12-31 and check the calendar
    // against a naive month-length table.
    let start = days_from_civil(1600, 1, 1);
    let (mut y, mut m, mut d) = (1600_i64, 1_u8, 1_u8);
    let end = days_from_civil(2500, 12, 31);
    for days in start..=end {
        let c = civil_utc(days * 86_400 * 1_000_000);
        assert_eq!((c.year, c.month, c.day), (y, m, d), "day {days}");
        assert_eq!(days_from_civil(y, m, d), days);
        let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        let len = match m {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        if d < len {
            d += 1;
        } else if m < 12 {
            (m, d) = (m + 1, 1);
        } else {
            (y, m, d) = (y + 1, 1, 1);
        }
    }
    assert_eq!(days_from_civil(1970, 1, 1), 0);
    assert_eq!(days_from_civil(1969, 12, 31), -1);
    // The civil algorithms count from 0000-03-01.
    assert_eq!(days_from_civil(0, 3, 1), -719_468);
    // Out-of-range arguments saturate or give nonsense, never a panic.
    let _ = days_from_civil(i64::MAX, 12, 31);
    let _ = days_from_civil(i64::MIN, 0, 0);
    let _ = days_from_civil(0, 255, 255);
}

#[test]
fn negative_times_sweep_consistently() {
    // Every hour for two years either side of the epoch: the fields follow
    // from the previous instant by exactly one hour.
    let mut prev = civil_utc(-2 * 365 * 86_400 * 1_000_000);
    for h in (-2 * 365 * 24 + 1)..(2 * 365 * 24) {
        let c = civil_utc(h * 3600 * 1_000_000);
        assert_eq!(c.hour, (prev.hour + 1) % 24, "{h}");
        assert_eq!((c.minute, c.second, c.micros), (0, 0, 0));
        if c.hour == 0 {
            assert_ne!((c.year, c.month, c.day), (prev.year, prev.month, prev.day));
        } else {
            assert_eq!((c.year, c.month, c.day), (prev.year, prev.month, prev.day));
        }
        prev = c;
    }
}

// ---- hand-built TZif files ---------------------------------------------------

/// A TZif file as this test writes it.
struct Spec<'a> {
    version: u8,
    /// (instant, type index)
    transitions: &'a [(i64, u8)],
    /// (utoff, is_dst)
    types: &'a [(i32, bool)],
    /// Number of leap-second records to add (their content is irrelevant).
    leaps: usize,
    /// The footer TZ string; `None` writes no footer at all.
    footer: Option<&'a str>,
    /// Write the version-1 block with all counts zero, as `zic -b slim` does.
    slim_v1: bool,
}

const CET: &[(i32, bool)] = &[(3600, false), (7200, true)];
/// Berlin's 2024 transitions: 2024-03-31T01:00Z and 2024-10-27T01:00Z.
const CET_2024: &[(i64, u8)] = &[(1_711_846_800, 1), (1_729_990_800, 0)];
const CET_RULE: &str = "CET-1CEST,M3.5.0,M10.5.0/3";

impl Spec<'_> {
    fn cet(version: u8, footer: Option<&'static str>) -> Spec<'static> {
        Spec {
            version,
            transitions: CET_2024,
            types: CET,
            leaps: 0,
            footer,
            slim_v1: false,
        }
    }

    /// The designation table and each type's index into it. The names are
    /// the ones a POSIX footer derives for the same offsets, since RFC 8536
    /// §3.3 wants the last transition's type consistent with the footer.
    fn designations(&self) -> (Vec<u8>, Vec<u8>) {
        let mut table = Vec::new();
        let mut index = Vec::new();
        for &(utoff, dst) in self.types {
            let name = match (utoff, dst) {
                (3600, false) => "CET".to_owned(),
                (7200, true) => "CEST".to_owned(),
                _ => {
                    let abs = i64::from(utoff).abs();
                    let (h, m) = (abs / 3600, abs % 3600 / 60);
                    let sign = if utoff < 0 { '-' } else { '+' };
                    if m == 0 {
                        format!("{sign}{h:02}")
                    } else {
                        format!("{sign}{h:02}{m:02}")
                    }
                }
            };
            index.push(u8::try_from(table.len()).unwrap());
            table.extend_from_slice(name.as_bytes());
            table.push(0);
        }
        (table, index)
    }

    /// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt.
    fn counts(&self) -> [usize; 6] {
        let (table, _) = self.designations();
        let types = self.types.len();
        [
            types,
            types,
            self.leaps,
            self.transitions.len(),
            types,
            table.len(),
        ]
    }

    fn header(&self, out: &mut Vec<u8>, counts: [usize; 6]) {
        out.extend_from_slice(b"TZif");
        out.push(self.version);
        out.extend_from_slice(&[0; 15]);
        for n in counts {
            out.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
        }
    }

    fn block(&self, out: &mut Vec<u8>, wide: bool) {
        for &(t, _) in self.transitions {
            if wide {
                out.extend_from_slice(&t.to_be_bytes());
            } else {
                out.extend_from_slice(&i32::try_from(t).unwrap().to_be_bytes());
            }
        }
        out.extend(self.transitions.iter().map(|&(_, i)| i));
        let (table, index) = self.designations();
        for (&(utoff, dst), idx) in self.types.iter().zip(index) {
            out.extend_from_slice(&utoff.to_be_bytes());
            out.push(u8::from(dst));
            out.push(idx);
        }
        out.extend_from_slice(&table);
        for n in 0..self.leaps {
            let n = i64::try_from(n).unwrap();
            if wide {
                out.extend_from_slice(&(78_796_800 + n * 10_000_000).to_be_bytes());
            } else {
                out.extend_from_slice(&i32::try_from(78_796_800 + n).unwrap().to_be_bytes());
            }
            out.extend_from_slice(&i32::try_from(n + 1).unwrap().to_be_bytes());
        }
        out.extend(std::iter::repeat_n(0, 2 * self.types.len()));
    }

    /// Length of the version-1 header and block (what a v2+ reader skips).
    fn v1_len(&self) -> usize {
        let [isut, isstd, leaps, times, types, chars] = self.counts();
        44 + times * 5 + types * 6 + chars + leaps * 8 + isstd + isut
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.slim_v1 {
            // As `zic -b slim` writes it: one type (UT, "") and nothing else.
            self.header(&mut out, [0, 0, 0, 0, 1, 1]);
            out.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
        } else {
            self.header(&mut out, self.counts());
            self.block(&mut out, false);
        }
        if self.version != 0 {
            self.header(&mut out, self.counts());
            self.block(&mut out, true);
            if let Some(footer) = self.footer {
                out.push(b'\n');
                out.extend_from_slice(footer.as_bytes());
                out.push(b'\n');
            }
        }
        out
    }

    fn zone(&self) -> LocalZone {
        LocalZone::from_tzif(&self.bytes(), "test").unwrap()
    }
}

/// Instants around Berlin's 2024 and 2025 transitions.
const SPRING_2024: i64 = 1_711_846_800;
const AUTUMN_2024: i64 = 1_729_990_800;
const SPRING_2025: i64 = 1_743_296_400;
const AUTUMN_2025: i64 = 1_761_440_400;

#[test]
fn v2_transitions_take_effect_at_their_instant() {
    for version in [b'2', b'3', b'4'] {
        let zone = Spec::cet(version, Some(CET_RULE)).zone();
        assert_eq!(zone.offset_at(SPRING_2024 - 1), 3600);
        assert_eq!(zone.offset_at(SPRING_2024), 7200);
        assert_eq!(zone.offset_at(AUTUMN_2024 - 1), 7200);
        assert_eq!(zone.offset_at(AUTUMN_2024), 3600);
        assert_eq!(zone.stamp(SPRING_2024 - 1), "20240331-015959");
        assert_eq!(zone.stamp(SPRING_2024), "20240331-030000");
        assert_eq!(zone.source(), "test");
        assert!(!zone.is_utc_fallback());
    }
}

#[test]
fn before_the_first_transition_type_zero_applies() {
    let zone = Spec::cet(b'2', Some(CET_RULE)).zone();
    assert_eq!(zone.offset_at(0), 3600);
    assert_eq!(zone.offset_at(i64::MIN), 3600);
}

#[test]
fn before_the_first_transition_type_zero_applies_even_when_it_is_dst() {
    // RFC 8536 §3.2: "Local time for timestamps before the first transition
    // is specified by the first time type (time type 0)". zic never writes
    // a leading DST type; older readers guessed the first standard one.
    let spec = Spec {
        version: b'2',
        transitions: &[(1_000_000, 0)],
        types: &[(7200, true), (-3600, true), (3600, false), (0, false)],
        leaps: 0,
        footer: Some(""),
        slim_v1: false,
    };
    let zone = spec.zone();
    assert_eq!(zone.offset_at(999_999), 7200);
    assert_eq!(zone.offset_at(1_000_000), 7200);
    // All types DST: type 0 too.
    let spec = Spec {
        types: &[(7200, true), (3600, true)],
        ..spec
    };
    assert_eq!(spec.zone().offset_at(0), 7200);
}

#[test]
fn after_the_last_transition_the_footer_rules_apply() {
    let zone = Spec::cet(b'2', Some(CET_RULE)).zone();
    assert_eq!(zone.offset_at(SPRING_2025 - 1), 3600);
    assert_eq!(zone.offset_at(SPRING_2025), 7200);
    assert_eq!(zone.offset_at(AUTUMN_2025 - 1), 7200);
    assert_eq!(zone.offset_at(AUTUMN_2025), 3600);
    // Far in the future: 2100-07-01 and 2100-01-01, and beyond any year.
    assert_eq!(zone.offset_at(4_118_083_200), 7200);
    assert_eq!(zone.offset_at(4_102_444_800), 3600);
    assert_eq!(zone.offset_at(i64::MAX), 3600);
}

#[test]
fn with_an_empty_footer_the_last_type_stays_and_a_bad_one_is_refused() {
    let zone = Spec::cet(b'2', Some("")).zone();
    assert_eq!(zone.offset_at(SPRING_2025), 3600);
    assert_eq!(zone.offset_at(AUTUMN_2024 - 1), 7200);
    // A version 2+ file must end in a footer (RFC 8536 §3.3), and one that
    // is not a TZ string is malformed: such a file is refused, and the
    // caller falls back to UTC saying why, rather than guessing.
    for footer in [None, Some("not a rule"), Some("CET-1CEST,M13.1.0,M1.1.0")] {
        assert_malformed(&Spec::cet(b'2', footer).bytes());
    }
    // Version 1 files have no footer.
    let zone = Spec::cet(0, None).zone();
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(SPRING_2025), 3600);
}

#[test]
fn version_1_files_use_the_32_bit_block() {
    let zone = Spec::cet(0, None).zone();
    assert_eq!(zone.offset_at(SPRING_2024 - 1), 3600);
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(AUTUMN_2024), 3600);
}

#[test]
fn the_64_bit_block_wins_over_a_different_32_bit_one() {
    // A v2 file whose v1 block says something else entirely: the v1 block
    // must be skipped, including a slim one with no types at all.
    let v2 = Spec::cet(b'2', Some(CET_RULE));
    let other = Spec {
        types: &[(-36_000, false), (-32_400, true)],
        ..Spec::cet(b'2', None)
    };
    let mut bytes = other.bytes();
    // Keep only that v1 part, then append v2's second header, block, footer.
    bytes.truncate(other.v1_len());
    let full = v2.bytes();
    bytes.extend_from_slice(&full[v2.v1_len()..]);
    let zone = LocalZone::from_tzif(&bytes, "mixed").unwrap();
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(0), 3600);

    let slim = Spec {
        slim_v1: true,
        ..Spec::cet(b'2', Some(CET_RULE))
    };
    let zone = slim.zone();
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(SPRING_2025), 7200);
}

#[test]
fn transitions_beyond_2038_come_from_the_64_bit_block() {
    // 2040-03-25T01:00Z, not representable in 32 bits.
    let spec = Spec {
        version: b'2',
        transitions: &[(2_216_509_200, 1)],
        types: CET,
        leaps: 0,
        footer: Some(""),
        slim_v1: true,
    };
    let zone = spec.zone();
    assert_eq!(zone.offset_at(2_216_509_199), 3600);
    assert_eq!(zone.offset_at(2_216_509_200), 7200);
}

#[test]
fn leap_second_records_are_skipped() {
    let spec = Spec {
        leaps: 3,
        ..Spec::cet(b'2', Some(CET_RULE))
    };
    let zone = spec.zone();
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(SPRING_2025), 7200);
    let spec = Spec {
        leaps: 3,
        ..Spec::cet(0, None)
    };
    assert_eq!(spec.zone().offset_at(SPRING_2024), 7200);
}

#[test]
fn no_transitions_means_footer_or_type_zero() {
    let spec = Spec {
        version: b'2',
        transitions: &[],
        types: &[(3600, false)],
        leaps: 0,
        footer: Some(CET_RULE),
        slim_v1: false,
    };
    let zone = spec.zone();
    assert_eq!(zone.offset_at(SPRING_2024 - 1), 3600);
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    let spec = Spec {
        footer: Some(""),
        types: &[(19_800, false)],
        ..spec
    };
    assert_eq!(spec.zone().offset_at(SPRING_2024), 19_800);
    assert_eq!(spec.zone().stamp(0), "19700101-053000");
}

// ---- malformed TZif data -------------------------------------------------------

#[track_caller]
fn assert_malformed(bytes: &[u8]) {
    match LocalZone::from_tzif(bytes, "bad") {
        Err(ZoneError::Malformed(what)) => assert!(!what.is_empty()),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

/// Overwrites the big-endian u32 at `at`.
fn put_u32(bytes: &mut [u8], at: usize, n: u32) {
    bytes[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

#[test]
fn specific_malformations_are_errors() {
    let good = Spec::cet(b'2', Some(CET_RULE)).bytes();
    // The texts are the parser's own; each case must be refused as malformed.
    assert_malformed(b"");
    assert_malformed(b"TZi");
    assert_malformed(&[b'X'; 64]);

    let mut bytes = good.clone();
    bytes[0] = b't';
    assert_malformed(&bytes);

    // Huge counts in either header: refused before any allocation.
    for header_at in [0, Spec::cet(b'2', Some(CET_RULE)).v1_len()] {
        for field in 0..6 {
            let mut bytes = good.clone();
            put_u32(&mut bytes, header_at + 20 + 4 * field, u32::MAX);
            assert_malformed(&bytes);
        }
    }

    let v1 = Spec::cet(0, None).bytes();
    let mut bytes = v1.clone();
    put_u32(&mut bytes, 36, 0); // typecnt
    put_u32(&mut bytes, 20, 0); // isutcnt
    put_u32(&mut bytes, 24, 0); // isstdcnt
    assert_malformed(&bytes);

    // Transitions out of order: not refused by the parser, but whatever it
    // answers is still a sane offset.
    let spec = Spec {
        transitions: &[(10, 0), (10, 1)],
        ..Spec::cet(0, None)
    };
    check_no_panic(&spec.bytes());
    // Type index out of range.
    let spec = Spec {
        transitions: &[(10, 2)],
        ..Spec::cet(0, None)
    };
    assert_malformed(&spec.bytes());
    // isdst neither 0 nor 1: read as daylight time, still a sane zone.
    let mut bytes = v1.clone();
    bytes[44 + 8 + 2 + 4] = 2;
    check_no_panic(&bytes);
    // Offsets beyond ±25:59:59, the widest a POSIX TZ string can express.
    for utoff in [i32::MIN, -93_600, 93_600, i32::MAX] {
        let spec = Spec {
            types: &[(utoff, false)],
            transitions: &[],
            ..Spec::cet(0, None)
        };
        assert_malformed(&spec.bytes());
    }
}

#[test]
fn every_truncation_is_an_error_or_a_sane_zone() {
    let files = [
        Spec::cet(0, None).bytes(),
        Spec::cet(b'2', Some(CET_RULE)).bytes(),
        Spec {
            leaps: 2,
            // Lord Howe's 2024: +10:30 from April 7, +11 from October 6.
            transitions: &[(1_712_415_600, 0), (1_728_142_200, 1)],
            types: &[(37_800, false), (39_600, true)],
            ..Spec::cet(b'3', Some("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"))
        }
        .bytes(),
    ];
    let real = Path::new(ZONEINFO_DIR).join("Europe/Berlin");
    let real = std::fs::read(&real).unwrap_or_default();
    for bytes in files.iter().chain([&real]) {
        for len in 0..bytes.len() {
            check_no_panic(&bytes[..len]);
        }
        // (Cutting only into the footer leaves a valid zone without it.)
        assert!(bytes.is_empty() || LocalZone::from_tzif(bytes, "x").is_ok());
    }
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let bytes = Spec {
        leaps: 1,
        ..Spec::cet(b'2', Some(CET_RULE))
    }
    .bytes();
    for at in 0..bytes.len() {
        for flip in [0x01, 0x10, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            check_no_panic(&bad);
        }
    }
}

#[test]
fn random_garbage_is_handled() {
    // xorshift64*: deterministic, no dependency.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let template = Spec::cet(b'2', Some(CET_RULE)).bytes();
    for round in 0..20_000 {
        let mut bytes = if round % 2 == 0 {
            template.clone()
        } else {
            let len = usize::try_from(next() % 400).unwrap();
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if b.len() >= 5 {
                b[..5].copy_from_slice(b"TZif2");
            }
            b
        };
        // Small random counts make the parser walk further than pure noise.
        let n = usize::try_from(next() % 8).unwrap();
        for _ in 0..n {
            if bytes.is_empty() {
                break;
            }
            let at = usize::try_from(next()).unwrap() % bytes.len();
            bytes[at] = if next() % 2 == 0 {
                (next() % 4) as u8
            } else {
                next() as u8
            };
        }
        let cut = usize::try_from(next()).unwrap() % (bytes.len() + 1);
        if next() % 4 == 0 {
            bytes.truncate(cut);
        }
        check_no_panic(&bytes);
    }
}

fn check_no_panic(bytes: &[u8]) {
    if let Ok(zone) = LocalZone::from_tzif(bytes, "fuzz") {
        for t in [
            i64::MIN,
            -1,
            0,
            SPRING_2024 - 1,
            SPRING_2024,
            SPRING_2025,
            4_102_444_800,
            i64::MAX,
        ] {
            let off = zone.offset_at(t);
            assert!((-89_999..=93_599).contains(&off), "{off}");
            let _ = zone.stamp(t);
        }
    }
}

// ---- POSIX TZ strings ----------------------------------------------------------

fn posix(spec: &str) -> LocalZone {
    LocalZone::from_posix_tz(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

#[test]
fn posix_fixed_offsets() {
    assert_eq!(posix("JST-9").offset_at(0), 9 * 3600);
    assert_eq!(posix("<+0530>-5:30").offset_at(0), 19_800);
    assert_eq!(posix("<-03>3").offset_at(0), -3 * 3600);
    assert_eq!(posix("XXX+1:02:03").offset_at(0), -3723);
    assert_eq!(posix("UTC0").offset_at(SPRING_2024), 0);
}

#[test]
fn posix_month_week_day_rules() {
    let cet = posix(CET_RULE);
    for (t, want) in [
        (SPRING_2024 - 1, 3600),
        (SPRING_2024, 7200),
        (AUTUMN_2024 - 1, 7200),
        (AUTUMN_2024, 3600),
        (SPRING_2025, 7200),
        (AUTUMN_2025, 3600),
        // 1980-03-30T01:00Z: the rules know nothing of history.
        (323_226_000, 7200),
        (-1, 3600),
    ] {
        assert_eq!(cet.offset_at(t), want, "{t}");
    }

    // New York: second Sunday in March, first Sunday in November, 02:00;
    // also the implied default rules of a bare "EST5EDT".
    for spec in [
        "EST5EDT,M3.2.0,M11.1.0",
        "EST5EDT,M3.2.0/2,M11.1.0/2:00:00",
        "EST5EDT",
    ] {
        let ny = posix(spec);
        assert_eq!(ny.offset_at(1_710_054_000 - 1), -18_000, "{spec}");
        assert_eq!(ny.offset_at(1_710_054_000), -14_400, "{spec}");
        assert_eq!(ny.offset_at(1_730_613_600 - 1), -14_400, "{spec}");
        assert_eq!(ny.offset_at(1_730_613_600), -18_000, "{spec}");
    }
}

#[test]
fn posix_southern_hemisphere_and_half_hour_dst() {
    // Lord Howe: +10:30, +11 from the first Sunday in October to the first
    // Sunday in April, both at 02:00 local.
    let lh = posix("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0");
    // 2024-04-07 02:00 +11 = 2024-04-06T15:00Z; 2024-10-06 02:00 +10:30.
    assert_eq!(lh.offset_at(1_712_415_600 - 1), 39_600);
    assert_eq!(lh.offset_at(1_712_415_600), 37_800);
    assert_eq!(lh.offset_at(1_728_142_200 - 1), 37_800);
    assert_eq!(lh.offset_at(1_728_142_200), 39_600);
    // New Year's Eve and New Year's Day are in daylight time.
    assert_eq!(lh.offset_at(1_704_067_200), 39_600);
    assert_eq!(lh.offset_at(1_704_067_200 - 1), 39_600);
    assert_eq!(lh.stamp(1_704_067_200), "20240101-110000");
}

#[test]
fn posix_week_five_means_the_last_one() {
    // M2.5.0: the last Sunday of February, which in 2024 (Sundays 4, 11,
    // 18, 25) is only the fourth.
    let z = posix("AAA0BBB,M2.5.0/0,M12.5.6/0");
    let feb25_2024 = days_from_civil(2024, 2, 25) * 86_400;
    assert_eq!(z.offset_at(feb25_2024 - 1), 0);
    assert_eq!(z.offset_at(feb25_2024), 3600);
    // December 2024: last Saturday is the 28th (local daylight midnight).
    let dec28_2024 = days_from_civil(2024, 12, 28) * 86_400 - 3600;
    assert_eq!(z.offset_at(dec28_2024 - 1), 3600);
    assert_eq!(z.offset_at(dec28_2024), 0);
}

#[test]
fn posix_julian_rules() {
    // J60 is March 1 every year (February 29 is never counted).
    let j = posix("XXX-1YYY,J60/2,J300/3");
    let mar1_2024 = 1_709_254_800; // 2024-03-01T01:00Z = 02:00 +01
    assert_eq!(j.offset_at(mar1_2024 - 1), 3600);
    assert_eq!(j.offset_at(mar1_2024), 7200);
    let mar1_2023 = days_from_civil(2023, 3, 1) * 86_400 + 3600;
    assert_eq!(j.offset_at(mar1_2023 - 1), 3600);
    assert_eq!(j.offset_at(mar1_2023), 7200);

    // Zero-based n counts February 29: day 59 is Feb 29 in 2024, Mar 1 in 2023.
    let n = posix("XXX-1YYY,59/0,300/0");
    let feb29_2024 = days_from_civil(2024, 2, 29) * 86_400 - 3600;
    assert_eq!(n.offset_at(feb29_2024 - 1), 3600);
    assert_eq!(n.offset_at(feb29_2024), 7200);
    let mar1_2023 = days_from_civil(2023, 3, 1) * 86_400 - 3600;
    assert_eq!(n.offset_at(mar1_2023 - 1), 3600);
    assert_eq!(n.offset_at(mar1_2023), 7200);
}

#[test]
fn posix_extended_rule_times() {
    // RFC 8536 §3.3.1's example of daylight time all year. Like the C
    // library, the rules are applied year by year, which leaves the first
    // five hours (UTC) of each year in standard time; the comparison with
    // date(1) below covers those.
    let all_year = posix("EST5EDT,0/0,J365/25");
    for t in [1_704_067_199, 1_704_085_200, 1_720_000_000] {
        assert_eq!(all_year.offset_at(t), -14_400, "{t}");
    }
    // Negative rule times (America/Nuuk since 2023): "the last Sunday of
    // March at -1:00" is Saturday 23:00 local (-02), i.e. Sunday 01:00Z.
    let nuuk = posix("<-02>2<-01>,M3.5.0/-1,M10.5.0/0");
    let spring = days_from_civil(2024, 3, 31) * 86_400 + 3600;
    assert_eq!(nuuk.offset_at(spring - 1), -7200);
    assert_eq!(nuuk.offset_at(spring), -3600);
}

#[test]
fn bad_posix_strings_are_refused() {
    for spec in [
        "",
        "C",
        "CE-1",
        "CET",
        "CET-",
        "CET-25",
        "CET-1CEST,",
        "CET-1CEST,M3.5.0",
        "CET-1CEST,M3.5.0,",
        "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0",
        "CET-1CEST,M3.5.7,M10.5.0",
        "CET-1CEST,M3.5.0,M10.5.0/168",
        "CET-1CEST,J0,J365",
        "CET-1CEST,366,0",
        "CET-1CEST,M3.5.0,M10.5.0 ",
        "<CE>-1",
        "<CET-1",
        "CET-1:60",
        "CET-1:5:",
        "CET-0001",
        "CET\u{e9}-1",
    ] {
        assert!(
            matches!(LocalZone::from_posix_tz(spec), Err(ZoneError::BadPosixTz)),
            "{spec:?}"
        );
    }
}

// ---- TZ resolution, files ---------------------------------------------------------

fn zone_for(tz: &str) -> LocalZone {
    LocalZone::from_tz_var(Some(OsStr::new(tz)))
}

#[test]
fn tz_values_meaning_utc() {
    for tz in ["", ":", "UTC", "UTC0", ":UTC"] {
        let zone = zone_for(tz);
        assert!(!zone.is_utc_fallback(), "{tz:?}");
        assert_eq!(zone.offset_at(SPRING_2024), 0);
    }
}

#[test]
fn tz_posix_string_when_no_such_file() {
    let zone = zone_for(CET_RULE);
    assert!(!zone.is_utc_fallback());
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert!(zone.source().contains("POSIX"), "{}", zone.source());
    // A leading ':' means a file name, never a rule string.
    let zone = zone_for(&format!(":{CET_RULE}"));
    assert!(zone.is_utc_fallback());
}

#[test]
fn tz_failures_fall_back_to_utc_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"TZif2 this is not a zone file").unwrap();
    let huge = dir.path().join("huge");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(MAX_TZIF_BYTES + 1).unwrap();

    let cases = [
        (
            "No/Such/Zone".to_owned(),
            "/usr/share/zoneinfo/No/Such/Zone unreadable",
        ),
        ("../../../etc/passwd".to_owned(), "'..'"),
        (format!(":{}", garbage.display()), "malformed"),
        (garbage.display().to_string(), "malformed"),
        (format!(":{}", huge.display()), "larger than"),
        (format!(":{}", dir.path().display()), "not a regular file"),
    ];
    for (tz, reason) in cases {
        let zone = zone_for(&tz);
        assert!(zone.is_utc_fallback(), "{tz}");
        assert!(
            zone.source().starts_with("using UTC: "),
            "{}",
            zone.source()
        );
        assert!(zone.source().contains(reason), "{}", zone.source());
        assert_eq!(zone.offset_at(SPRING_2024), 0);
    }

    assert!(matches!(
        LocalZone::from_file(&huge),
        Err(ZoneError::TooLarge)
    ));
    assert!(matches!(
        LocalZone::from_file(dir.path()),
        Err(ZoneError::NotAFile)
    ));
    assert!(matches!(
        LocalZone::from_file(&dir.path().join("missing")),
        Err(ZoneError::Io(_))
    ));
}

#[test]
fn tz_file_paths_load_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cet");
    std::fs::write(&path, Spec::cet(b'2', Some(CET_RULE)).bytes()).unwrap();
    for tz in [path.display().to_string(), format!(":{}", path.display())] {
        let zone = zone_for(&tz);
        assert!(!zone.is_utc_fallback(), "{}", zone.source());
        assert_eq!(zone.offset_at(SPRING_2024), 7200);
        assert!(zone.source().contains(&path.display().to_string()));
    }
}

#[test]
fn process_zone_is_consistent() {
    let zone = timefmt::local_zone();
    assert_eq!(timefmt::local_time_source(), zone.source());
    for t in [0, SPRING_2024, 1_712_346_080] {
        assert_eq!(timefmt::utc_offset_seconds(t), zone.offset_at(t));
        assert_eq!(timefmt::local_stamp(t), zone.stamp(t));
    }
    println!("local time source: {}", zone.source());
}

// ---- the real zoneinfo database -------------------------------------------------

/// The zone file of `name`, or `None` (saying why) when it is absent.
fn real_zone(name: &str) -> Option<LocalZone> {
    let path = Path::new(ZONEINFO_DIR).join(name);
    if !path.is_file() {
        println!("skipped: {} is absent", path.display());
        return None;
    }
    Some(LocalZone::from_file(&path).unwrap())
}

#[test]
fn real_europe_berlin() {
    let Some(zone) = real_zone("Europe/Berlin") else {
        return;
    };
    assert_eq!(zone.offset_at(1_705_000_000), 3600); // January 2024
    assert_eq!(zone.offset_at(1_720_000_000), 7200); // July 2024
    assert_eq!(zone.offset_at(SPRING_2024 - 1), 3600);
    assert_eq!(zone.offset_at(SPRING_2024), 7200);
    assert_eq!(zone.offset_at(AUTUMN_2024 - 1), 7200);
    assert_eq!(zone.offset_at(AUTUMN_2024), 3600);
    assert_eq!(zone.offset_at(4_118_083_200), 7200); // July 2100
    assert_eq!(zone.stamp(1_712_346_080), "20240405-214120");
    // TZ names resolve to the same file.
    let by_name = zone_for("Europe/Berlin");
    assert!(!by_name.is_utc_fallback(), "{}", by_name.source());
    assert_eq!(by_name.offset_at(SPRING_2024), 7200);
    assert_eq!(zone_for(":Europe/Berlin").offset_at(SPRING_2024), 7200);
}

#[test]
fn real_america_new_york() {
    let Some(zone) = real_zone("America/New_York") else {
        return;
    };
    assert_eq!(zone.offset_at(1_710_054_000 - 1), -18_000);
    assert_eq!(zone.offset_at(1_710_054_000), -14_400);
    assert_eq!(zone.offset_at(1_730_613_600 - 1), -14_400);
    assert_eq!(zone.offset_at(1_730_613_600), -18_000);
    // 1883 and before: local mean time, -4:56:02.
    assert_eq!(zone.offset_at(-3_000_000_000), -17_762);
}

#[test]
fn real_australia_lord_howe() {
    let Some(zone) = real_zone("Australia/Lord_Howe") else {
        return;
    };
    assert_eq!(zone.offset_at(1_712_415_600 - 1), 39_600);
    assert_eq!(zone.offset_at(1_712_415_600), 37_800);
    assert_eq!(zone.offset_at(1_728_142_200 - 1), 37_800);
    assert_eq!(zone.offset_at(1_728_142_200), 39_600);
}

#[test]
fn real_utc() {
    let Some(zone) = real_zone("UTC") else {
        return;
    };
    for t in [i64::MIN, 0, SPRING_2024, i64::MAX] {
        assert_eq!(zone.offset_at(t), 0);
    }
}

#[test]
fn every_real_zone_file_parses() {
    let root = Path::new(ZONEINFO_DIR);
    if !root.is_dir() {
        println!("skipped: {ZONEINFO_DIR} is absent");
        return;
    }
    let mut stack = vec![root.to_path_buf()];
    let mut parsed = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            if !bytes.starts_with(b"TZif") {
                continue; // zone.tab, tzdata.zi, …
            }
            let zone = LocalZone::from_tzif(&bytes, "real")
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            check_no_panic(&bytes);
            let _ = zone.offset_at(SPRING_2024);
            parsed += 1;
        }
    }
    assert!(parsed > 100, "only {parsed} zone files");
}

// ---- cross-check against date(1) ------------------------------------------------

/// `TZ=<tz> date +%::z` for each instant, in one process; `None` (saying
/// why) when the command is unusable.
fn date_offsets(tz: &str, instants: &[i64]) -> Option<Vec<i32>> {
    let input: String = instants.iter().map(|t| format!("@{t}\n")).collect();
    let child = Command::new("date")
        .env("TZ", tz)
        .args(["-f", "-", "+%::z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        println!("skipped: no date command");
        return None;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        println!("skipped: date -f - +%::z failed (not GNU date?)");
        return None;
    }
    let parse = |line: &str| -> i32 {
        let (sign, rest) = line.split_at(1);
        let parts: Vec<i32> = rest.split(':').map(|p| p.parse().unwrap()).collect();
        let secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
        if sign == "-" { -secs } else { secs }
    };
    let offsets: Vec<i32> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(parse)
        .collect();
    assert_eq!(offsets.len(), instants.len());
    Some(offsets)
}

/// Samples from `start` to 2100 every ~9 days, then pins each change our
/// reader sees to the second and adds the instants on either side of it.
fn instants_for(zone: &LocalZone, start: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let (end, step) = (4_102_444_800_i64, 800_000);
    let mut t = start;
    while t < end {
        let next = t + step;
        if zone.offset_at(t) != zone.offset_at(next) {
            // Binary search for the first instant of the new offset.
            let (mut lo, mut hi) = (t, next);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if zone.offset_at(mid) == zone.offset_at(t) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            out.extend([lo, hi]);
        }
        out.push(t);
        t = next;
    }
    out
}

#[test]
fn real_zones_agree_with_date() {
    if !Path::new(ZONEINFO_DIR).is_dir() {
        println!("skipped: {ZONEINFO_DIR} is absent");
        return;
    }
    for name in [
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "America/Nuuk",
        "America/Sao_Paulo",
        "Pacific/Chatham",
        "Asia/Kolkata",
        "Africa/Casablanca",
        "Antarctica/Troll",
        "Europe/Dublin",
        "UTC",
    ] {
        let Some(zone) = real_zone(name) else {
            continue;
        };
        // From 1900.
        let instants = instants_for(&zone, -2_208_988_800);
        let Some(want) = date_offsets(name, &instants) else {
            return;
        };
        for (t, want) in instants.iter().zip(want) {
            assert_eq!(zone.offset_at(*t), want, "{name} at {t}");
        }
    }
}

#[test]
fn posix_strings_agree_with_date() {
    for spec in [
        CET_RULE,
        // (Not a bare "EST5EDT": glibc takes the missing rules from the
        // posixrules file, i.e. New York's history, this reader from the
        // tz code's built-in US rules.)
        "EST5EDT,M3.2.0,M11.1.0",
        "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0",
        "<-02>2<-01>,M3.5.0/-1,M10.5.0/0",
        "XXX-1YYY,J60/2,J300/3",
        "XXX-1YYY,59/0,300/0",
        "NZST-12NZDT,M9.5.0,M4.1.0/3",
        "AAA3BBB2:30,M10.1.6/23:59:59,M2.3.0/1:30",
        "EST5EDT,0/0,J365/25",
    ] {
        let zone = posix(spec);
        // glibc applies rule strings only from 1970 on (earlier years get
        // 1970's rules); this reader applies them to every year.
        let instants = instants_for(&zone, 86_400);
        let Some(want) = date_offsets(spec, &instants) else {
            return;
        };
        for (t, want) in instants.iter().zip(want) {
            assert_eq!(zone.offset_at(*t), want, "{spec} at {t}");
        }
    }
}

#[test]
fn local_stamp_agrees_with_date() {
    let instants = [
        0,
        SPRING_2024 - 1,
        SPRING_2024,
        1_712_346_080,
        2_147_483_648,
    ];
    for t in instants {
        // Same environment as this process, so the same zone.
        let Ok(out) = Command::new("date")
            .args(["-d", &format!("@{t}"), "+%Y%m%d-%H%M%S"])
            .output()
        else {
            println!("skipped: no date command");
            return;
        };
        if !out.status.success() {
            println!("skipped: date -d failed");
            return;
        }
        let want = String::from_utf8(out.stdout).unwrap();
        assert_eq!(timefmt::local_stamp(t), want.trim_end(), "{t}");
    }
}
