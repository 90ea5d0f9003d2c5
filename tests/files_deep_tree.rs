//! FILE_DELETE of a directory tree far deeper than the descriptor limit
//! (FILES.md §5.3). The platform can build trees thousands of levels deep
//! (writes with `create_parents`, then moves), so the recursive delete must
//! not hold one descriptor per level.
//!
//! This binary holds a single test on purpose: it lowers the process's soft
//! `RLIMIT_NOFILE`, which would starve tests running beside it.

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::OwnedFd;
use std::path::Path;

use autogpt_shim::files::{self, FileContext};
use autogpt_shim::jail::{Jail, JailOptions};
use autogpt_shim::protocol::{Ack, FileDelete, Message};
use rustix::fs::{Mode, OFlags};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Levels of the tree; far beyond the lowered limit below.
const DEPTH: usize = 3000;
/// The soft descriptor limit while deleting.
const LOW_LIMIT: u64 = 256;

fn open_dir(parent: &OwnedFd, name: &str) -> OwnedFd {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

fn put_file(dir: &OwnedFd, name: &str) {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&fd, b"x").unwrap();
}

/// `top/d/d/…/d` (`DEPTH` levels, built through descriptors because the
/// path is longer than `PATH_MAX`), with a file at every level, and every
/// 97 levels a side directory holding a file and a link, so that finishing
/// a deep branch returns to directories that still have entries left.
fn build(top: &Path) {
    std::fs::create_dir(top).unwrap();
    let mut cur = rustix::fs::open(
        top,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    for level in 0..DEPTH {
        put_file(&cur, "f");
        if level % 97 == 0 {
            rustix::fs::mkdirat(&cur, "side", Mode::from_raw_mode(0o755)).unwrap();
            let side = open_dir(&cur, "side");
            put_file(&side, "g");
            rustix::fs::symlinkat("../..", &side, "up").unwrap();
        }
        rustix::fs::mkdirat(&cur, "d", Mode::from_raw_mode(0o755)).unwrap();
        cur = open_dir(&cur, "d");
    }
    put_file(&cur, "leaf");
}

#[test]
fn a_3000_level_tree_deletes_fully_with_256_descriptors() {
    for walker in [false, true] {
        let label = if walker { "walker" } else { "openat2" };
        let tmp = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(tmp.path()).unwrap().join("w");
        std::fs::create_dir(&w).unwrap();
        std::fs::write(w.join("keep.txt"), "keep").unwrap();
        build(&w.join("deep"));
        let jail = Jail::pin(
            &w,
            JailOptions {
                force_walker: walker,
                ..Default::default()
            },
        )
        .unwrap();
        let ctx = FileContext {
            jail: &jail,
            max_file_size_bytes: 1024,
            refuse_multilink_reads: false,
            umask: Mode::from_raw_mode(0o022),
        };
        let req = FileDelete {
            path: format!("{}/deep", w.display()),
            recursive: true,
            missing_ok: false,
        };

        let saved = getrlimit(Resource::Nofile);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(LOW_LIMIT),
                maximum: saved.maximum,
            },
        )
        .unwrap();
        let out = files::delete(&ctx, &req);
        // Restored before asserting, so that cleanup has descriptors.
        setrlimit(Resource::Nofile, saved).unwrap();

        assert_eq!(out.reply, Ok(Message::Ack(Ack::OK)), "[{label}]");
        assert!(
            std::fs::symlink_metadata(w.join("deep")).is_err(),
            "[{label}] the tree is gone"
        );
        assert_eq!(std::fs::read(w.join("keep.txt")).unwrap(), b"keep");
    }
}
