//! JAIL.md §7 cases 16–17: a symlink swapped in between the decision and
//! the use of a path never leads outside the root.
//!
//! One thread exchanges `w/sub` (a real directory) with a symlink to the
//! outside directory as fast as it can, using `renameat2(RENAME_EXCHANGE)`,
//! while workers read, stat, list, write and delete through `w/sub` for at
//! least five seconds per resolver. The outside canary must never be read,
//! changed or removed, and nothing may appear outside.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use autogpt_shim::files::{self, FileContext};
use autogpt_shim::jail::{Jail, JailOptions};
use autogpt_shim::protocol::{
    Encoding, FileDelete, FileList, FileRead, FileStat, FileWrite, Message, ReadFormat,
};
use rustix::fs::{Mode, RenameFlags};

const CANARY: &str = "canary-must-never-leak";
const RACE_FOR: Duration = Duration::from_secs(5);

/// Name → (size, mtime, inode) of everything below `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, i64, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            out.insert(entry.path(), (meta.size(), meta.mtime(), meta.ino()));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out
}

fn race(walker: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let w = base.join("w");
    let o = base.join("o");
    std::fs::create_dir_all(w.join("sub")).unwrap();
    std::fs::create_dir_all(&o).unwrap();
    std::fs::write(w.join("sub/x"), "inside").unwrap();
    std::fs::write(w.join("sub/del"), "inside").unwrap();
    for name in ["x", "del", "new"] {
        std::fs::write(o.join(name), CANARY).unwrap();
    }
    symlink(&o, w.join("alt")).unwrap();
    let before = snapshot(&o);

    let jail = Jail::pin(
        &w,
        JailOptions {
            force_walker: walker,
            ..Default::default()
        },
    )
    .unwrap();
    let real_sub = &rustix::fs::open(
        w.join("sub"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let ops = AtomicU64::new(0);

    let ctx = FileContext {
        jail: &jail,
        max_file_size_bytes: 1 << 20,
        refuse_multilink_reads: false,
        umask: Mode::from_raw_mode(0o022),
    };
    std::thread::scope(|s| {
        let (stop2, swaps2, w2) = (stop.clone(), swaps.clone(), w.clone());
        s.spawn(move || {
            let dir = rustix::fs::open(&w2, rustix::fs::OFlags::RDONLY, Mode::empty()).unwrap();
            while !stop2.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(&dir, "sub", &dir, "alt", RenameFlags::EXCHANGE).unwrap();
                swaps2.fetch_add(1, Ordering::Relaxed);
            }
        });
        for worker in 0..4 {
            let (ctx, stop, ops, w) = (&ctx, &stop, &ops, &w);
            s.spawn(move || {
                let sub = |rel: &str| format!("{}/sub/{rel}", w.display());
                while !stop.load(Ordering::Relaxed) {
                    match worker {
                        0 => {
                            let out = files::read(
                                ctx,
                                &FileRead {
                                    path: sub("x"),
                                    encoding: Encoding::Utf8,
                                    format: ReadFormat::Text,
                                    offset: 0,
                                    length: None,
                                },
                            );
                            if let Ok(Message::FileContents(c)) = &out.reply {
                                assert_ne!(c.content, CANARY, "read escaped the root");
                            }
                            let out = files::stat(
                                ctx,
                                &FileStat {
                                    path: sub("x"),
                                    follow_symlinks: true,
                                },
                            );
                            if let Ok(Message::FileStatResponse(r)) = &out.reply {
                                assert_ne!(r.size_bytes, Some(CANARY.len() as u64));
                            }
                        }
                        1 => {
                            let out = files::list(
                                ctx,
                                &FileList {
                                    path: sub(""),
                                    glob: None,
                                    recursive: true,
                                    include_hidden: true,
                                    max_entries: 100,
                                },
                            );
                            if let Ok(Message::FileListResponse(r)) = &out.reply {
                                for e in &r.entries {
                                    assert_ne!(e.size_bytes, CANARY.len() as u64, "{e:?}");
                                }
                            }
                        }
                        2 => {
                            let _ = files::write(
                                ctx,
                                FileWrite {
                                    path: sub("new"),
                                    content: "written".into(),
                                    encoding: Encoding::Utf8,
                                    create_parents: false,
                                },
                            );
                        }
                        _ => {
                            let _ = files::delete(
                                ctx,
                                &FileDelete {
                                    path: sub("del"),
                                    recursive: false,
                                    missing_ok: true,
                                },
                            );
                            // Recreate it through the real directory's fd (never by
                            // path: `sub` may be the link to the outside right now).
                            let _ = rustix::fs::openat(
                                real_sub,
                                "del",
                                rustix::fs::OFlags::WRONLY
                                    | rustix::fs::OFlags::CREATE
                                    | rustix::fs::OFlags::NOFOLLOW,
                                Mode::from_raw_mode(0o644),
                            );
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let start = Instant::now();
        while start.elapsed() < RACE_FOR {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });

    let after = snapshot(&o);
    assert_eq!(before, after, "the outside directory changed");
    for name in ["x", "del", "new"] {
        assert_eq!(std::fs::read_to_string(o.join(name)).unwrap(), CANARY);
    }
    let (swaps, ops) = (swaps.load(Ordering::Relaxed), ops.load(Ordering::Relaxed));
    eprintln!("walker={walker}: {swaps} swaps, {ops} operations, no escape");
    assert!(swaps > 1000 && ops > 100, "the race did not really run");
}

#[test]
fn symlink_swap_race_never_escapes_with_openat2() {
    race(false);
}

#[test]
fn symlink_swap_race_never_escapes_with_the_walker() {
    race(true);
}
