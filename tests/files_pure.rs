//! The pure helpers of the FILE_* operations: the MIME guess of FILE_STAT
//! (FILES.md §3.4), the glob filter of FILE_LIST (§4.4) and the base64 codec
//! of FILE_READ / FILE_WRITE (§1.2 step 12, §2.2 step 2).

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use autogpt_shim::files::base64::{self, Base64Error};
use autogpt_shim::files::{GlobTooLong, MAX_GLOB_CHARS, Pattern, mime};

// ---- mime: the stable core the specification names ---------------------------

#[test]
fn stable_core_extensions_have_their_types() {
    let cases = [
        ("notes.txt", "text/plain"),
        ("data.csv", "text/csv"),
        ("config.json", "application/json"),
        ("index.html", "text/html"),
        ("logo.png", "image/png"),
        ("photo.jpg", "image/jpeg"),
        ("paper.pdf", "application/pdf"),
        ("bundle.zip", "application/zip"),
        ("main.py", "text/x-python"),
    ];
    for (name, mime_type) in cases {
        assert_eq!(mime::guess(name), Some(mime_type), "{name}");
    }
}

#[test]
fn tar_gz_is_a_tar_archive() {
    assert_eq!(mime::guess("a.tar.gz"), Some("application/x-tar"));
}

#[test]
fn bare_compression_suffix_has_no_type() {
    assert_eq!(mime::guess("a.gz"), None);
    assert_eq!(mime::guess("a.Z"), None);
    assert_eq!(mime::guess("a.bz2"), None);
    assert_eq!(mime::guess("a.xz"), None);
    assert_eq!(mime::guess("a.br"), None);
}

#[test]
fn name_without_extension_has_no_type() {
    assert_eq!(mime::guess("README"), None);
    assert_eq!(mime::guess("Makefile"), None);
    assert_eq!(mime::guess(""), None);
}

// ---- mime: the extension split -----------------------------------------------

#[test]
fn leading_dots_do_not_start_an_extension() {
    assert_eq!(mime::guess(".bashrc"), None);
    assert_eq!(mime::guess(".txt"), None);
    assert_eq!(mime::guess("..txt"), None);
    assert_eq!(mime::guess("."), None);
    assert_eq!(mime::guess(".."), None);
}

#[test]
fn extension_is_taken_from_the_last_dot() {
    assert_eq!(mime::guess("a..txt"), Some("text/plain"));
    assert_eq!(mime::guess("a.b.c.txt"), Some("text/plain"));
    assert_eq!(mime::guess(".hidden.txt"), Some("text/plain"));
    assert_eq!(mime::guess("archive.txt.zip"), Some("application/zip"));
}

#[test]
fn trailing_dot_extension_matches_nothing() {
    assert_eq!(mime::guess("a."), None);
    assert_eq!(mime::guess("a.tar."), None);
}

// ---- mime: suffix aliases ----------------------------------------------------

#[test]
fn suffix_aliases_expand_to_compressed_types() {
    assert_eq!(mime::guess("a.tgz"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.taz"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.tz"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.tbz2"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.txz"), Some("application/x-tar"));
    assert_eq!(mime::guess("x.svgz"), Some("image/svg+xml"));
}

#[test]
fn suffix_aliases_are_case_sensitive() {
    assert_eq!(mime::guess("a.TGZ"), None);
    assert_eq!(mime::guess("x.SVGZ"), None);
}

#[test]
fn alias_needs_a_name_before_its_dot() {
    assert_eq!(mime::guess(".tgz"), None);
}

// ---- mime: compression suffixes ----------------------------------------------

#[test]
fn compression_suffix_is_dropped_before_lookup() {
    assert_eq!(mime::guess("a.csv.gz"), Some("text/csv"));
    assert_eq!(mime::guess("a.tar.Z"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.tar.bz2"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.tar.xz"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.tar.br"), Some("application/x-tar"));
    assert_eq!(mime::guess("a.svg.gz"), Some("image/svg+xml"));
}

#[test]
fn only_one_compression_suffix_is_dropped() {
    assert_eq!(mime::guess("a.tar.gz.gz"), None);
    assert_eq!(mime::guess("a.tgz.gz"), None);
}

#[test]
fn compression_suffixes_are_case_sensitive() {
    // `.GZ` is not a compression suffix, and its lower-case form is not a type.
    assert_eq!(mime::guess("a.tar.GZ"), None);
    // `.z` is not `.Z`.
    assert_eq!(mime::guess("a.tar.z"), None);
}

#[test]
fn remainder_after_compression_suffix_follows_the_split_rule() {
    // The remainder `.csv` is re-split by the same leading-dot rule: no extension.
    assert_eq!(mime::guess(".csv.gz"), None);
    assert_eq!(mime::guess("x.csv.gz"), Some("text/csv"));
    assert_eq!(mime::guess("..gz"), None);
    assert_eq!(mime::guess("a..gz"), None);
}

// ---- mime: lookup ------------------------------------------------------------

#[test]
fn lookup_falls_back_to_lower_case() {
    assert_eq!(mime::guess("A.TXT"), Some("text/plain"));
    assert_eq!(mime::guess("Photo.JPeG"), Some("image/jpeg"));
    assert_eq!(mime::guess("a.TAR.gz"), Some("application/x-tar"));
}

#[test]
fn lower_case_fallback_is_unicode_aware() {
    // U+212A KELVIN SIGN lower-cases to an ASCII `k`, exactly as in Python.
    assert_eq!(mime::guess("run.\u{212A}SH"), Some("text/plain"));
}

#[test]
fn table_is_the_built_in_map_not_a_host_database() {
    // Types that host databases add must not appear.
    assert_eq!(mime::guess("a.yaml"), None);
    assert_eq!(mime::guess("a.docx"), None);
    assert_eq!(mime::guess("a.rs"), None);
    // Entries where the 3.13 built-in map differs from older interpreters.
    assert_eq!(mime::guess("a.js"), Some("text/javascript"));
    assert_eq!(mime::guess("a.md"), Some("text/markdown"));
    assert_eq!(mime::guess("a.webp"), Some("image/webp"));
    assert_eq!(mime::guess("a.xml"), Some("text/xml"));
    assert_eq!(mime::guess("a.wasm"), Some("application/wasm"));
}

#[test]
fn first_and_last_table_rows_are_found() {
    assert_eq!(mime::guess("clip.3g2"), Some("audio/3gpp2"));
    assert_eq!(mime::guess("image.xwd"), Some("image/x-xwindowdump"));
    assert_eq!(mime::guess("lib.a"), Some("application/octet-stream"));
}

// ---- glob: `*` and `?` -------------------------------------------------------

fn matches(pattern: &str, name: &str) -> bool {
    Pattern::new(pattern).matches(name)
}

#[test]
fn star_matches_any_sequence_including_empty() {
    assert!(matches("*", ""));
    assert!(matches("*", "anything at all"));
    assert!(matches("a*", "a"));
    assert!(matches("a*c", "abbbc"));
    assert!(matches("*.txt", "notes.txt"));
    assert!(!matches("*.txt", "notes.txt.bak"));
}

#[test]
fn star_matches_a_leading_dot() {
    assert!(matches("*", ".bashrc"));
    assert!(matches("*.txt", ".txt"));
    assert!(matches("*rc", ".bashrc"));
}

#[test]
fn star_matches_newlines_and_non_ascii() {
    assert!(matches("a*b", "a\nb"));
    assert!(matches("*é", "café"));
}

#[test]
fn question_mark_matches_exactly_one_scalar_value() {
    assert!(matches("?", "a"));
    assert!(matches("?", "é"));
    assert!(matches("?", "😀"));
    assert!(matches("?", "\n"));
    assert!(!matches("?", ""));
    assert!(!matches("?", "ab"));
    assert!(!matches("??", "é"));
    assert!(matches("caf?", "café"));
}

#[test]
fn double_star_is_just_a_star() {
    assert!(matches("**", "abc"));
    assert!(matches("a**c", "abc"));
    assert!(!matches("**b", "abc"));
    assert!(matches("*.**", ".x"));
}

// ---- glob: sets --------------------------------------------------------------

#[test]
fn set_matches_one_member() {
    assert!(matches("[abc]", "b"));
    assert!(!matches("[abc]", "d"));
    assert!(!matches("[abc]", ""));
    assert!(!matches("[abc]", "ab"));
    assert!(matches("file[0-9].log", "file7.log"));
}

#[test]
fn negated_set_matches_one_non_member() {
    assert!(matches("[!abc]", "d"));
    assert!(!matches("[!abc]", "a"));
    assert!(!matches("[!abc]", ""));
    assert!(!matches("[!abc]", "dd"));
}

#[test]
fn caret_is_not_negation() {
    assert!(matches("[^a]", "^"));
    assert!(matches("[^a]", "a"));
    assert!(!matches("[^a]", "b"));
}

#[test]
fn closing_bracket_first_in_a_set_is_literal() {
    assert!(matches("[]]", "]"));
    assert!(matches("[]a]", "a"));
    assert!(matches("[]a]", "]"));
    assert!(!matches("[!]]", "]"));
    assert!(matches("[!]]", "x"));
    assert!(matches("[!]a]", "b"));
    assert!(!matches("[!]a]", "a"));
}

#[test]
fn range_is_inclusive_by_code_point() {
    assert!(matches("[a-c]", "a"));
    assert!(matches("[a-c]", "c"));
    assert!(!matches("[a-c]", "d"));
    assert!(!matches("[a-c]", "B"));
    assert!(matches("[α-ω]", "λ"));
    assert!(matches("[]-a]", "^"));
}

#[test]
fn reversed_range_matches_nothing() {
    assert!(!matches("[z-a]", "z"));
    assert!(!matches("[z-a]", "a"));
    assert!(!matches("[z-a]", "m"));
    assert!(!matches("[z-a]", "-"));
    // Other members of the same set still count; the end points do not.
    assert!(matches("[xz-ab]", "x"));
    assert!(matches("[xz-ab]", "b"));
    assert!(!matches("[xz-ab]", "z"));
    assert!(!matches("[xz-ab]", "a"));
    // A negated set left without members matches any one character.
    assert!(matches("[!z-a]", "q"));
    assert!(!matches("[!z-a]", ""));
}

#[test]
fn only_a_bang_right_after_the_bracket_negates() {
    // Once the reversed range `z-a` contributes nothing, the `!` that follows
    // is an ordinary member; it does not turn the set into `[!x]`. (Python's
    // regex translation happens to negate here; FILES.md §4.4 does not.)
    assert!(matches("[z-a!x]", "!"));
    assert!(matches("[z-a!x]", "x"));
    assert!(!matches("[z-a!x]", "q"));
    assert!(matches("[a!]", "!"));
    assert!(!matches("[a!]", "b"));
}

#[test]
fn hyphen_first_or_last_is_literal() {
    assert!(matches("[-a]", "-"));
    assert!(matches("[a-]", "-"));
    assert!(matches("[a-]", "a"));
    assert!(!matches("[a-]", "b"));
    assert!(matches("[!-a]", "b"));
    assert!(!matches("[!-a]", "-"));
}

#[test]
fn hyphen_after_a_range_is_literal() {
    for member in ["a", "b", "c", "-", "e"] {
        assert!(matches("[a-c-e]", member), "{member}");
    }
    assert!(!matches("[a-c-e]", "d"));
}

#[test]
fn hyphen_can_be_a_range_end_point() {
    // `--a` is the range '-'..='a'.
    assert!(matches("[--a]", "0"));
    assert!(matches("[--a]", "-"));
    assert!(!matches("[--a]", "b"));
    // `a--` is reversed ('-' < 'a'): nothing, then `b` alone.
    assert!(matches("[a--b]", "b"));
    assert!(!matches("[a--b]", "a"));
    assert!(!matches("[a--b]", "-"));
}

#[test]
fn unclosed_bracket_is_a_literal() {
    assert!(matches("[", "["));
    assert!(matches("[abc", "[abc"));
    assert!(!matches("[abc", "a"));
    assert!(matches("a[", "a["));
    assert!(matches("[]", "[]"));
    assert!(matches("[!]", "[!]"));
    // Characters after the literal `[` keep their meaning.
    assert!(matches("[a*", "[abc"));
    assert!(matches("[?", "[x"));
}

#[test]
fn wildcards_inside_a_set_are_literal() {
    assert!(matches("[*?]", "*"));
    assert!(matches("[*?]", "?"));
    assert!(!matches("[*?]", "a"));
    assert!(matches("[[]", "["));
    assert!(matches("[a[]x", "[x"));
}

// ---- glob: characters without a special role ----------------------------------

#[test]
fn backslash_is_a_literal_character() {
    assert!(matches("\\*", "\\"));
    assert!(matches("\\*", "\\abc"));
    assert!(!matches("\\*", "*"));
    assert!(matches("a\\?", "a\\b"));
    assert!(!matches("a\\?", "a?"));
    // Inside a set too: `[\]` is the set {\}, then a literal `]`.
    assert!(matches("[\\]]", "\\]"));
    assert!(!matches("[\\]]", "]"));
}

#[test]
fn braces_are_literal() {
    assert!(matches("{a,b}", "{a,b}"));
    assert!(!matches("{a,b}", "a"));
    assert!(matches("*.{rs}", "x.{rs}"));
}

#[test]
fn match_covers_the_whole_name() {
    assert!(matches("abc", "abc"));
    assert!(!matches("abc", "abcd"));
    assert!(!matches("bc", "abc"));
    assert!(!matches("ab", "abc"));
    assert!(!matches("", "a"));
    assert!(matches("", ""));
}

#[test]
fn matching_is_case_sensitive() {
    assert!(!matches("*.TXT", "a.txt"));
    assert!(!matches("a", "A"));
    assert!(!matches("[a-z]", "Q"));
}

// ---- glob: cost ----------------------------------------------------------------

#[test]
fn pathological_star_pattern_finishes_in_polynomial_time() {
    let pattern = Pattern::new("*a*a*a*a*a*a*a*a*b");
    let name = "a".repeat(20_000);
    let started = Instant::now();
    assert!(!pattern.matches(&name));
    assert!(pattern.matches(&format!("{name}b")));
    // Exponential backtracking would not finish at all; quadratic work here is
    // a few hundred thousand comparisons.
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Names a listing may test: up to 100,000 entries (the examined-entry cap).
const LISTING_NAMES: usize = 100_000;
/// A long but realistic entry name length.
const NAME_CHARS: usize = 200;

#[test]
fn run_of_unclosed_brackets_compiles_in_linear_time() {
    // Each `[` is literal. Looking for a `]` after every one of them would be
    // quadratic: about 3 × 10^10 steps here, which would hang the test run.
    let run = "[".repeat(256 * 1024);
    let pattern = Pattern::new(&run);
    assert!(pattern.matches(&run));
    assert!(!pattern.matches(&run[1..]));
    // With a `]` at the end, the first `[` opens a set that swallows the
    // whole run: one token matching `[` or `x`.
    let pattern = Pattern::new(&format!("{run}x]"));
    assert!(pattern.matches("["));
    assert!(pattern.matches("x"));
    assert!(!pattern.matches("[x"));
}

#[test]
fn longest_run_of_unclosed_brackets_filters_a_full_listing() {
    let pattern = Pattern::parse(&"[".repeat(MAX_GLOB_CHARS)).unwrap();
    let short = "[".repeat(NAME_CHARS);
    let other = "x".repeat(NAME_CHARS);
    let matched = (0..LISTING_NAMES)
        .filter(|i| pattern.matches(if i % 2 == 0 { &short } else { &other }))
        .count();
    assert_eq!(matched, 0);
    assert!(pattern.matches(&"[".repeat(MAX_GLOB_CHARS)));
}

#[test]
fn longest_set_filters_a_full_listing() {
    // `*[...]` with 1,021 members that stay separate ranges (every other
    // code point from U+0100), so membership cannot collapse to one range
    // check. The star makes every name character meet the set: scanning the
    // members for each test would be about 2 × 10^10 steps over the listing.
    let members: String = (0..MAX_GLOB_CHARS as u32 - 3)
        .map(|k| char::from_u32(0x100 + 2 * k).unwrap())
        .collect();
    let glob = format!("*[{members}]");
    assert_eq!(glob.chars().count(), MAX_GLOB_CHARS);
    let pattern = Pattern::parse(&glob).unwrap();

    let last_member = members.chars().last().unwrap();
    let between = char::from_u32(u32::from(last_member) - 1).unwrap();
    let base = "a".repeat(NAME_CHARS - 1);
    let hit = format!("{base}{last_member}");
    let miss = format!("{base}{between}");
    let matched = (0..LISTING_NAMES)
        .filter(|i| pattern.matches(if i % 2 == 0 { &hit } else { &miss }))
        .count();
    assert_eq!(matched, LISTING_NAMES / 2);
}

#[test]
fn parse_accepts_a_glob_of_exactly_the_limit() {
    assert_eq!(MAX_GLOB_CHARS, 1024);
    let glob = "a".repeat(MAX_GLOB_CHARS);
    assert_eq!(Pattern::parse(&glob), Ok(Pattern::new(&glob)));
    // The limit counts characters, not bytes.
    assert!(Pattern::parse(&"é".repeat(MAX_GLOB_CHARS)).is_ok());
}

#[test]
fn parse_refuses_a_glob_one_character_over_the_limit() {
    assert_eq!(
        Pattern::parse(&"a".repeat(MAX_GLOB_CHARS + 1)),
        Err(GlobTooLong)
    );
    assert_eq!(
        Pattern::parse(&"é".repeat(MAX_GLOB_CHARS + 1)),
        Err(GlobTooLong)
    );
    assert_eq!(GlobTooLong.to_string(), "glob longer than 1024 characters");
}

#[test]
fn parse_refuses_a_frame_sized_glob() {
    let glob = "[".repeat(16 * 1024 * 1024);
    assert_eq!(Pattern::parse(&glob), Err(GlobTooLong));
}

#[test]
fn star_backtracking_finds_late_matches() {
    assert!(matches("*ab*ab", "aabababxab"));
    assert!(matches("a*b*c", "aXbYbZc"));
    assert!(!matches("a*b*c", "aXbYbZ"));
    assert!(matches("*?*?*", "ab"));
    assert!(!matches("*?*?*", "a"));
}

// ---- base64: encoding ----------------------------------------------------------

#[test]
fn encode_matches_the_rfc_4648_vectors() {
    let vectors: [(&[u8], &str); 7] = [
        (b"", ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg=="),
        (b"fooba", "Zm9vYmE="),
        (b"foobar", "Zm9vYmFy"),
    ];
    for (raw, text) in vectors {
        assert_eq!(base64::encode(raw), text);
        assert_eq!(base64::decode_strict(text.to_owned()).unwrap(), raw);
    }
}

#[test]
fn encode_uses_the_standard_alphabet() {
    assert_eq!(base64::encode(&[0xFB, 0xFF]), "+/8=");
    assert_eq!(base64::encode(&[0xFF, 0xFF, 0xFF]), "////");
    assert_eq!(base64::encode(&[0, 0, 0]), "AAAA");
}

#[test]
fn encode_never_breaks_lines() {
    let text = base64::encode(&[0x5A; 1000]);
    assert_eq!(text.len(), 1336);
    assert!(!text.contains(['\n', '\r']));
}

#[test]
fn encode_handles_the_full_base64_read_limit() {
    // MAX_WIRE_BASE64_CONTENT_BYTES → 16,711,680 characters.
    let raw: Vec<u8> = (0..12_533_760u32).map(|i| (i % 251) as u8).collect();
    let text = base64::encode(&raw);
    assert_eq!(text.len(), 16_711_680);
    assert_eq!(&text[..8], base64::encode(&raw[..6]));
}

// ---- base64: strict decoding ---------------------------------------------------

fn decode(text: &str) -> Vec<u8> {
    base64::decode_strict(text.to_owned()).unwrap_or_else(|e| panic!("{text:?} refused: {e}"))
}

fn refuse(text: &str) -> Base64Error {
    match base64::decode_strict(text.to_owned()) {
        Ok(bytes) => panic!("{text:?} accepted as {bytes:?}"),
        Err(e) => e,
    }
}

#[test]
fn empty_text_decodes_to_no_bytes() {
    assert_eq!(decode(""), b"");
}

#[test]
fn full_groups_need_no_padding() {
    assert_eq!(decode("QUJD"), b"ABC");
    assert_eq!(decode("QUJDREVG"), b"ABCDEF");
}

#[test]
fn full_groups_tolerate_any_trailing_padding() {
    assert_eq!(decode("QUJD="), b"ABC");
    assert_eq!(decode("QUJD=="), b"ABC");
    assert_eq!(decode("QUJD====="), b"ABC");
}

#[test]
fn two_character_group_needs_exactly_two_pads() {
    assert_eq!(decode("QQ=="), b"A");
    assert_eq!(
        refuse("QQ"),
        Base64Error::WrongPadding {
            expected: 2,
            found: 0
        }
    );
    assert_eq!(
        refuse("QQ="),
        Base64Error::WrongPadding {
            expected: 2,
            found: 1
        }
    );
    assert_eq!(
        refuse("QQ==="),
        Base64Error::WrongPadding {
            expected: 2,
            found: 3
        }
    );
}

#[test]
fn three_character_group_needs_exactly_one_pad() {
    assert_eq!(decode("QUI="), b"AB");
    assert_eq!(
        refuse("QUI"),
        Base64Error::WrongPadding {
            expected: 1,
            found: 0
        }
    );
    assert_eq!(
        refuse("QUI=="),
        Base64Error::WrongPadding {
            expected: 1,
            found: 2
        }
    );
}

#[test]
fn one_character_group_is_refused() {
    assert_eq!(refuse("Q"), Base64Error::IncompleteGroup);
    assert_eq!(refuse("Q==="), Base64Error::IncompleteGroup);
    assert_eq!(refuse("QUJDR"), Base64Error::IncompleteGroup);
    assert_eq!(refuse("QUJDR=="), Base64Error::IncompleteGroup);
}

#[test]
fn unused_trailing_bits_are_ignored() {
    assert_eq!(decode("QR=="), b"A");
    assert_eq!(decode("QUJ="), b"AB");
    assert_eq!(decode("QUL="), b"AB");
    assert_eq!(decode("//=="), [0xFF]);
}

#[test]
fn padding_is_never_first() {
    assert_eq!(refuse("="), Base64Error::LeadingPadding);
    assert_eq!(refuse("===="), Base64Error::LeadingPadding);
    assert_eq!(refuse("=QUJD"), Base64Error::LeadingPadding);
}

#[test]
fn nothing_but_padding_follows_padding() {
    assert_eq!(refuse("QU=JD"), Base64Error::DataAfterPadding { offset: 3 });
    assert_eq!(
        refuse("QQ==QQ=="),
        Base64Error::DataAfterPadding { offset: 4 }
    );
    assert_eq!(
        refuse("QUJD=QUJD"),
        Base64Error::DataAfterPadding { offset: 5 }
    );
}

#[test]
fn characters_outside_the_alphabet_are_refused() {
    assert_eq!(
        refuse("QUJD\n"),
        Base64Error::InvalidCharacter { offset: 4 }
    );
    assert_eq!(refuse("QU-_"), Base64Error::InvalidCharacter { offset: 2 });
    assert_eq!(refuse("QU JD"), Base64Error::InvalidCharacter { offset: 2 });
    assert_eq!(
        refuse("QUJD\r\n"),
        Base64Error::InvalidCharacter { offset: 4 }
    );
    assert_eq!(refuse("QUJ\t"), Base64Error::InvalidCharacter { offset: 3 });
    assert_eq!(refuse("QUJé"), Base64Error::InvalidCharacter { offset: 3 });
    assert_eq!(
        refuse("QQ==\n"),
        Base64Error::InvalidCharacter { offset: 4 }
    );
    assert_eq!(refuse("QQ= ="), Base64Error::InvalidCharacter { offset: 3 });
    assert_eq!(
        refuse("QUJD\0"),
        Base64Error::InvalidCharacter { offset: 4 }
    );
}

#[test]
fn error_reasons_are_short_and_never_quote_content() {
    let reasons = [
        refuse("QU-_").to_string(),
        refuse("=").to_string(),
        refuse("QU=JD").to_string(),
        refuse("Q").to_string(),
        refuse("QQ").to_string(),
    ];
    for reason in reasons {
        assert!(!reason.is_empty() && reason.len() < 80, "{reason}");
        assert!(!reason.contains("QU"), "{reason}");
        assert!(!reason.starts_with("Bad base64"), "{reason}");
    }
    assert_eq!(
        refuse("QQ").to_string(),
        "incorrect padding: expected 2 '=', found 0"
    );
}

/// The acceptance rules restated independently: strip the trailing `=` run,
/// then everything left must be alphabet characters and the counts must fit.
fn model_accepts(text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    let data = text.trim_end_matches('=');
    let pads = text.len() - data.len();
    if data.is_empty()
        || !data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    {
        return false;
    }
    match data.len() % 4 {
        0 => true,
        2 => pads == 2,
        3 => pads == 1,
        _ => false,
    }
}

#[test]
fn acceptance_agrees_with_the_rules_for_every_short_text() {
    // All texts of up to 7 characters over a small alphabet that exercises
    // each rule: data characters, padding, and a foreign character.
    let symbols = ['Q', '/', '=', '-'];
    let mut texts = vec![String::new()];
    let mut checked = 0;
    for _ in 0..7 {
        let mut longer = Vec::with_capacity(texts.len() * symbols.len());
        for text in &texts {
            for symbol in symbols {
                let mut t = text.clone();
                t.push(symbol);
                longer.push(t);
            }
        }
        for text in &longer {
            let accepted = base64::decode_strict(text.to_owned()).is_ok();
            assert_eq!(accepted, model_accepts(text), "{text:?}");
            checked += 1;
        }
        texts = longer;
    }
    assert_eq!(checked, 4 + 16 + 64 + 256 + 1024 + 4096 + 16384);
}

#[test]
fn decoded_length_follows_from_the_data_characters() {
    for (text, len) in [("QQ==", 1), ("QUI=", 2), ("QUJD", 3), ("QUJDQQ==", 4)] {
        assert_eq!(decode(text).len(), len, "{text}");
    }
}

// ---- base64: round trips -------------------------------------------------------

/// A small deterministic generator (xorshift64*), so failures reproduce.
fn pseudo_random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn round_trip_preserves_bytes_of_every_length() {
    for len in (0..=300).chain([1021, 1022, 1023, 4096, 65_537]) {
        let raw = pseudo_random_bytes(len as u64, len);
        let text = base64::encode(&raw);
        assert_eq!(text.len(), len.div_ceil(3) * 4, "length {len}");
        assert_eq!(
            base64::decode_strict(text.clone()).unwrap(),
            raw,
            "length {len}"
        );
    }
}

/// Long texts are decoded step by step into their own buffer; a refusal
/// deep inside one still names the first offending character, and a `=`
/// inside the data is still "data after padding".
#[test]
fn long_text_refusals_name_the_first_offender_wherever_it_is() {
    let text = base64::encode(&pseudo_random_bytes(7, 300_000));
    for offset in [0, 16_383, 16_384, 200_001, text.len() - 5] {
        for (bad, expected) in [
            (b'-', Base64Error::InvalidCharacter { offset }),
            (b'\n', Base64Error::InvalidCharacter { offset }),
            (
                b'=',
                if offset == 0 {
                    Base64Error::LeadingPadding
                } else {
                    Base64Error::DataAfterPadding { offset: offset + 1 }
                },
            ),
        ] {
            let mut broken = text.clone().into_bytes();
            broken[offset] = bad;
            let broken = String::from_utf8(broken).unwrap();
            assert_eq!(
                base64::decode_strict(broken),
                Err(expected.clone()),
                "{:?} at {offset}",
                bad as char
            );
        }
    }
}

#[test]
fn round_trip_covers_every_byte_value_in_every_position() {
    for shift in 0..3 {
        let raw: Vec<u8> = std::iter::repeat_n(0u8, shift).chain(0..=255).collect();
        assert_eq!(base64::decode_strict(base64::encode(&raw)).unwrap(), raw);
    }
}

#[test]
fn canonical_text_survives_decode_then_encode() {
    for text in ["", "Zg==", "Zm8=", "Zm9v", "+/+/", "AAAAAA==", "////////"] {
        assert_eq!(base64::encode(&decode(text)), text);
    }
}
