//! Fuzzes the path jail: random symlink trees inside and beside a root,
//! random request paths; whatever the jail lets enforcement open must be one
//! of the objects inside the root, judged by (device, inode) identity — never
//! by comparing path strings.
#![no_main]

use std::collections::HashSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use autogpt_shim::jail::{Jail, JailOptions, identity};
use libfuzzer_sys::fuzz_target;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

const NAMES: &[&str] = &["a", "b", "c", "sub", "..", ".", "x y", "é"];

/// A small deterministic reader over the fuzz input.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[usize::from(self.next()) % items.len()]
    }

    /// A relative path of 1–3 names from the pool.
    fn rel(&mut self) -> String {
        let n = 1 + usize::from(self.next()) % 3;
        (0..n)
            .map(|_| *self.pick(NAMES))
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Every object reachable below `dir` without following links.
fn identities(dir: &Path, out: &mut HashSet<(u64, u64)>) {
    let Ok(st) = rustix::fs::lstat(dir) else {
        return;
    };
    out.insert(identity(&st));
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        identities(&entry.path(), out);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let Ok(tmp) = tempfile::tempdir() else { return };
    let Ok(base) = std::fs::canonicalize(tmp.path()) else {
        return;
    };
    let root = base.join("r");
    let outside = base.join("o");
    if std::fs::create_dir(&root).is_err() || std::fs::create_dir(&outside).is_err() {
        return;
    }
    let _ = std::fs::write(outside.join("canary"), "canary");

    // Build a random tree: directories, files and symlinks on both sides.
    let ops = usize::from(input.next()) % 16;
    for _ in 0..ops {
        let side: &PathBuf = if input.next() % 4 == 0 {
            &outside
        } else {
            &root
        };
        let at = side.join(input.rel());
        match input.next() % 3 {
            0 => {
                let _ = std::fs::create_dir_all(&at);
            }
            1 => {
                let _ = std::fs::write(&at, "data");
            }
            _ => {
                let target = match input.next() % 4 {
                    0 => input.rel(),
                    1 => format!("../{}", input.rel()),
                    2 => format!("{}/{}", root.display(), input.rel()),
                    _ => format!("{}/{}", outside.display(), input.rel()),
                };
                let _ = symlink(target, &at);
            }
        }
    }

    let mut inside = HashSet::new();
    identities(&root, &mut inside);

    // The rest of the input: request paths separated by 0xff.
    let paths: Vec<String> = input
        .0
        .split(|&b| b == 0xff)
        .take(8)
        .map(|p| {
            let text = String::from_utf8_lossy(p).into_owned();
            match p.first() {
                Some(b'R') => format!("{}/{}", root.display(), &text[1..]),
                Some(b'O') => format!("{}/{}", outside.display(), &text[1..]),
                _ => text,
            }
        })
        .collect();

    for walker in [false, true] {
        let Ok(jail) = Jail::pin(
            &root,
            JailOptions {
                force_walker: walker,
                ..Default::default()
            },
        ) else {
            return;
        };
        for path in &paths {
            let Ok(decision) = jail.decide(path) else {
                continue;
            };
            let Ok(fd) = jail.open(&decision.remainder, OFlags::PATH, Mode::empty()) else {
                continue;
            };
            let st = rustix::fs::fstat(&fd).expect("fstat of an opened fd");
            assert!(
                inside.contains(&identity(&st)),
                "opened an object outside the root for {path:?} (walker: {walker})"
            );
            // The entry a mutating operation would act on must sit inside too.
            if let Ok(Some(entry)) = jail.entry(path, &decision) {
                if let Ok(dir) = jail.open(
                    &entry.parent,
                    OFlags::PATH | OFlags::DIRECTORY,
                    Mode::empty(),
                ) {
                    let st = rustix::fs::fstat(&dir).expect("fstat of an opened dir");
                    assert!(
                        inside.contains(&identity(&st)),
                        "entry parent outside for {path:?}"
                    );
                    let _ =
                        rustix::fs::statat(&dir, entry.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW);
                }
            }
        }
    }
});
