//! Fuzzes the `glob` filter of FILE_LIST: any pattern and name, split at the
//! first NUL byte. Compiling and matching must never panic or take longer
//! than their stated bounds, and matching must agree with what a pattern
//! means: a pattern without `*`, `?` or `[` matches only itself, and a star
//! or a `?` added at either end keeps every match a match.
#![no_main]

use autogpt_shim::files::Pattern;
use libfuzzer_sys::fuzz_target;

/// Longest name matched; entry names on disk are far shorter, and the bound
/// keeps one run within libFuzzer's time limit at the longest pattern.
const MAX_NAME_CHARS: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let (pattern, name) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let pattern = String::from_utf8_lossy(pattern);
    let name: String = String::from_utf8_lossy(name)
        .chars()
        .take(MAX_NAME_CHARS)
        .collect();
    let Ok(compiled) = Pattern::parse(&pattern) else {
        return;
    };
    let matched = compiled.matches(&name);

    if !pattern.contains(['*', '?', '[']) {
        assert_eq!(
            matched,
            *pattern == name,
            "literal {pattern:?} against {name:?}"
        );
    }
    if matched {
        let first = name.chars().next().unwrap_or('x');
        assert!(Pattern::new(&format!("*{pattern}")).matches(&format!("{first}{name}")));
        assert!(Pattern::new(&format!("{pattern}*")).matches(&format!("{name}{first}")));
        assert!(Pattern::new(&format!("?{pattern}")).matches(&format!("{first}{name}")));
    }
});
