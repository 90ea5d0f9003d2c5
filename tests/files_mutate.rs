//! FILE_WRITE, FILE_DELETE and FILE_MOVE on real files (FILES.md §2, §5, §6)
//! and the JAIL.md §7 attack cases that reach them. Every test runs against
//! both enforcement resolvers (`openat2` and the forced `O_NOFOLLOW` walker)
//! with a fresh tree: a root `w` and an outside sibling `o` (the canary)
//! whose contents and inodes must be unchanged after every test.
//!
//! Tests that need a second filesystem mount a tmpfs inside the root; they
//! are skipped with a printed reason unless running as root with permission
//! to mount.

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use autogpt_shim::daemon::{OperationError, rejection_code};
use autogpt_shim::files::{self, Audit, FileContext, FileOutcome};
use autogpt_shim::jail::RejectionKind;
use autogpt_shim::jail::{Jail, JailOptions, Resolver};
use autogpt_shim::protocol::{
    Ack, Encoding, ErrorCode, FileDelete, FileMove, FileStat, FileWrite, Message, MessageType,
};
use rustix::fs::Mode;

// ---- fixture -------------------------------------------------------------------

struct Fx {
    _tmp: tempfile::TempDir,
    /// Canonical root `/w`, with `sub/` and `f.txt` ("hello").
    w: PathBuf,
    /// Outside directory `/o`: `secret` ("secret") and `dir/inner.txt`.
    o: PathBuf,
    jail: Jail,
    walker: bool,
    canary: BTreeMap<PathBuf, Snap>,
}

/// What the canary check compares: kind, inode, mode and content/target.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snap {
    ino: u64,
    mode: u32,
    content: Vec<u8>,
}

impl Fx {
    fn new(walker: bool) -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let w = base.join("w");
        let o = base.join("o");
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::create_dir_all(o.join("dir")).unwrap();
        std::fs::write(w.join("f.txt"), "hello").unwrap();
        std::fs::write(o.join("secret"), "secret").unwrap();
        std::fs::write(o.join("dir/inner.txt"), "inner").unwrap();
        let jail = Jail::pin(
            &w,
            JailOptions {
                force_walker: walker,
                ..Default::default()
            },
        )
        .unwrap();
        let expected = if walker {
            Resolver::Walker
        } else {
            Resolver::Openat2
        };
        assert_eq!(jail.resolver(), expected, "resolver selection");
        let canary = snapshot(&o);
        Fx {
            _tmp: tmp,
            w,
            o,
            jail,
            walker,
            canary,
        }
    }

    /// Absolute wire path of `rel` below the root (`""` = the root).
    fn p(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.w.to_str().unwrap().to_owned()
        } else {
            format!("{}/{rel}", self.w.display())
        }
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.w.join(rel)
    }

    fn ctx(&self) -> FileContext<'_> {
        self.ctx_with(0o022, 1024 * 1024)
    }

    fn ctx_with(&self, umask: u32, max: u64) -> FileContext<'_> {
        FileContext {
            jail: &self.jail,
            max_file_size_bytes: max,
            refuse_multilink_reads: false,
            umask: Mode::from_raw_mode(umask),
        }
    }

    fn write(&self, path: &str, content: &str) -> FileOutcome {
        files::write(&self.ctx(), write_req(path, content, false))
    }

    fn write_parents(&self, path: &str, content: &str) -> FileOutcome {
        files::write(&self.ctx(), write_req(path, content, true))
    }

    fn delete(&self, path: &str, recursive: bool, missing_ok: bool) -> FileOutcome {
        files::delete(
            &self.ctx(),
            &FileDelete {
                path: path.to_owned(),
                recursive,
                missing_ok,
            },
        )
    }

    fn mv(&self, src: &str, dst: &str, overwrite: bool) -> FileOutcome {
        files::move_entry(
            &self.ctx(),
            &FileMove {
                src: src.to_owned(),
                dst: dst.to_owned(),
                overwrite,
            },
        )
    }

    fn stat(&self, path: &str, follow_symlinks: bool) -> FileOutcome {
        files::stat(
            &self.ctx(),
            &FileStat {
                path: path.to_owned(),
                follow_symlinks,
            },
        )
    }

    /// A second jail on the same root with `jail_no_xdev` on and this
    /// fixture's resolver.
    fn no_xdev_jail(&self) -> Jail {
        let jail = Jail::pin(
            &self.w,
            JailOptions {
                force_walker: self.walker,
                no_xdev: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(jail.no_xdev());
        jail
    }

    fn label(&self) -> &'static str {
        if self.walker { "walker" } else { "openat2" }
    }
}

/// A context on another jail (umask 022, 1 MiB limit).
fn ctx_of(jail: &Jail) -> FileContext<'_> {
    FileContext {
        jail,
        max_file_size_bytes: 1024 * 1024,
        refuse_multilink_reads: false,
        umask: Mode::from_raw_mode(0o022),
    }
}

fn write_req(path: &str, content: &str, create_parents: bool) -> FileWrite {
    FileWrite {
        path: path.to_owned(),
        content: content.to_owned(),
        encoding: Encoding::Utf8,
        create_parents,
    }
}

/// Every object below `dir` (not following links).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Snap> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if meta.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            out.insert(
                path,
                Snap {
                    ino: meta.ino(),
                    mode: meta.mode(),
                    content,
                },
            );
        }
    }
    out
}

/// Runs a test body against both resolvers, each with a fresh tree, and
/// checks afterwards that nothing outside the root changed.
fn both(body: impl Fn(&Fx)) {
    for walker in [false, true] {
        let fx = Fx::new(walker);
        body(&fx);
        assert_eq!(
            snapshot(&fx.o),
            fx.canary,
            "[{}] the outside directory changed",
            fx.label()
        );
    }
}

// ---- outcome checks --------------------------------------------------------------

#[track_caller]
fn assert_ack(fx: &Fx, o: &FileOutcome) {
    assert_eq!(
        o.reply,
        Ok(Message::Ack(Ack::OK)),
        "[{}] expected ACK",
        fx.label()
    );
    assert!(
        matches!(o.audit, Audit::Operation(_)),
        "[{}] operation record expected",
        fx.label()
    );
}

#[track_caller]
fn assert_error(fx: &Fx, o: &FileOutcome, code: ErrorCode) {
    match &o.reply {
        Err(e) => assert_eq!(e.code(), code, "[{}] {}", fx.label(), e.message()),
        Ok(m) => panic!("[{}] expected {code:?}, got {m:?}", fx.label()),
    }
    assert!(
        matches!(o.audit, Audit::Operation(_)),
        "[{}] operation record expected, got {:?}",
        fx.label(),
        o.audit
    );
}

#[track_caller]
fn assert_violation(fx: &Fx, o: &FileOutcome, code: ErrorCode, path: &str, op: MessageType) {
    match &o.reply {
        Err(e) => assert_eq!(e.code(), code, "[{}] {}", fx.label(), e.message()),
        Ok(m) => panic!("[{}] expected {code:?}, got {m:?}", fx.label()),
    }
    match &o.audit {
        Audit::JailViolation {
            rejection,
            path: audited,
            attempted_op,
        } => assert_eq!(
            (rejection_code(*rejection), audited.as_str(), *attempted_op),
            (code, path, op),
            "[{}]",
            fx.label()
        ),
        other => panic!("[{}] expected a JAIL_VIOLATION, got {other:?}", fx.label()),
    }
}

fn message(o: &FileOutcome) -> String {
    o.reply
        .as_ref()
        .err()
        .map(|e| e.message().to_owned())
        .unwrap_or_default()
}

fn details(o: &FileOutcome) -> serde_json::Map<String, serde_json::Value> {
    match &o.audit {
        Audit::Operation(d) => d.to_map(),
        other => panic!("operation record expected, got {other:?}"),
    }
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".autogpt-shim-"))
        .collect()
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

// ---- FILE_WRITE ------------------------------------------------------------------

#[test]
fn both_resolvers_are_exercised() {
    assert_eq!(Fx::new(true).jail.resolver(), Resolver::Walker);
    assert_eq!(Fx::new(false).jail.resolver(), Resolver::Openat2);
}

#[test]
fn write_creates_a_new_file_and_audits_the_canonical_path() {
    both(|fx| {
        let o = fx.write(&fx.p("sub/new.txt"), "content é");
        assert_ack(fx, &o);
        assert_eq!(
            std::fs::read_to_string(fx.at("sub/new.txt")).unwrap(),
            "content é"
        );
        let d = details(&o);
        assert_eq!(d["path"], fx.p("sub/new.txt"));
        assert_eq!(d["encoding"], "utf-8");
        assert_eq!(d["create_parents"], false);
        assert_eq!(d["size_bytes_written"], "content é".len());
    });
}

#[test]
fn relative_write_lands_below_the_root() {
    both(|fx| {
        assert_ack(fx, &fx.write("sub/../rel.txt", "r"));
        assert_eq!(std::fs::read(fx.at("rel.txt")).unwrap(), b"r");
    });
}

#[test]
fn write_base64_writes_the_decoded_bytes() {
    both(|fx| {
        let req = FileWrite {
            path: fx.p("bin"),
            content: "AP8Qgg==".into(),
            encoding: Encoding::Base64,
            create_parents: false,
        };
        let o = files::write(&fx.ctx(), req);
        assert_ack(fx, &o);
        assert_eq!(
            std::fs::read(fx.at("bin")).unwrap(),
            [0x00, 0xff, 0x10, 0x82]
        );
        assert_eq!(details(&o)["encoding"], "base64");
        assert_eq!(details(&o)["size_bytes_written"], 4);
    });
}

#[test]
fn a_large_write_lands_every_byte_in_order_whatever_its_encoding() {
    // Over a megabyte is written in several pieces; bytes that never
    // repeat their pattern would show a piece out of place or missing.
    let mut state = 0x2545_f491_u32;
    let raw: Vec<u8> = (0..1_300_001)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as u8
        })
        .collect();
    let text: String = raw.iter().map(|b| char::from(b'a' + b % 26)).collect();
    both(|fx| {
        for (name, content, encoding, expected) in [
            (
                "big.bin",
                files::base64::encode(&raw),
                Encoding::Base64,
                raw.as_slice(),
            ),
            ("big.txt", text.clone(), Encoding::Utf8, text.as_bytes()),
        ] {
            let req = FileWrite {
                path: fx.p(name),
                content,
                encoding,
                create_parents: false,
            };
            let o = files::write(&fx.ctx_with(0o022, 2 << 20), req);
            assert_ack(fx, &o);
            assert!(std::fs::read(fx.at(name)).unwrap() == expected, "{name}");
            assert_eq!(details(&o)["size_bytes_written"], expected.len());
        }
    });
}

#[test]
fn new_file_gets_0666_minus_umask() {
    both(|fx| {
        let o = files::write(
            &fx.ctx_with(0o027, 1024),
            write_req(&fx.p("m.txt"), "x", false),
        );
        assert_ack(fx, &o);
        let mode = std::fs::metadata(fx.at("m.txt")).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o640);
    });
}

#[test]
fn replacing_keeps_the_old_mode_and_changes_the_inode() {
    both(|fx| {
        let f = fx.at("f.txt");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o604)).unwrap();
        let before = std::fs::metadata(&f).unwrap().ino();
        assert_ack(fx, &fx.write(&fx.p("f.txt"), "new"));
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o604);
        assert_ne!(meta.ino(), before, "replaced atomically, not in place");
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
    });
}

#[test]
fn replacing_drops_setuid_and_setgid() {
    both(|fx| {
        let f = fx.at("f.txt");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6755)).unwrap();
        assert_ack(fx, &fx.write(&fx.p("f.txt"), "new"));
        let mode = std::fs::metadata(&f).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o755);
    });
}

#[test]
fn atomic_replace_leaves_no_temp_files() {
    both(|fx| {
        for i in 0..5 {
            assert_ack(fx, &fx.write(&fx.p("f.txt"), &format!("v{i}")));
            assert_ack(fx, &fx.write(&fx.p(&format!("n{i}")), "x"));
        }
        assert!(temp_files(&fx.w).is_empty(), "{:?}", temp_files(&fx.w));
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"v4");
    });
}

#[test]
fn write_through_a_hard_link_leaves_the_outside_inode_unchanged() {
    // JAIL.md §7 case 19.
    both(|fx| {
        std::fs::hard_link(fx.o.join("secret"), fx.at("h")).unwrap();
        assert_ack(fx, &fx.write(&fx.p("h"), "pwned"));
        assert_eq!(std::fs::read(fx.at("h")).unwrap(), b"pwned");
        assert_eq!(std::fs::read(fx.o.join("secret")).unwrap(), b"secret");
        let inside = std::fs::metadata(fx.at("h")).unwrap();
        let outside = std::fs::metadata(fx.o.join("secret")).unwrap();
        assert_ne!(inside.ino(), outside.ino());
        assert_eq!(outside.nlink(), 1);
    });
}

#[test]
fn write_to_a_dangling_link_pointing_outside_is_refused() {
    // JAIL.md §7 case 11 (D3).
    both(|fx| {
        symlink(fx.o.join("new"), fx.at("d2")).unwrap();
        let o = fx.write(&fx.p("d2"), "x");
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &fx.p("d2"),
            MessageType::FileWrite,
        );
        assert!(!exists(&fx.o.join("new")));
        assert!(is_link(&fx.at("d2")));
    });
}

#[test]
fn write_to_a_dangling_link_inside_creates_the_target_and_keeps_the_link() {
    // JAIL.md §7 case 12.
    both(|fx| {
        symlink("sub/new", fx.at("d3")).unwrap();
        let o = fx.write(&fx.p("d3"), "made");
        assert_ack(fx, &o);
        assert_eq!(std::fs::read(fx.at("sub/new")).unwrap(), b"made");
        assert!(is_link(&fx.at("d3")));
        assert_eq!(details(&o)["path"], fx.p("sub/new"));
    });
}

#[test]
fn write_through_an_inside_link_replaces_the_target_and_keeps_the_link() {
    both(|fx| {
        symlink("f.txt", fx.at("l")).unwrap();
        assert_ack(fx, &fx.write(&fx.p("l"), "via link"));
        assert!(is_link(&fx.at("l")));
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"via link");
    });
}

#[test]
fn create_parents_with_missing_dotdot_escape_is_refused_and_creates_nothing() {
    // JAIL.md §7 case 47 (D2).
    both(|fx| {
        let path = fx.p("new/../../o/pwn");
        let o = fx.write_parents(&path, "x");
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &path,
            MessageType::FileWrite,
        );
        assert!(!exists(&fx.at("new")));
        assert!(!exists(&fx.o.join("pwn")));
    });
}

#[test]
fn create_parents_creates_the_missing_directories() {
    // JAIL.md §7 case 48.
    both(|fx| {
        let o = fx.write_parents(&fx.p("a/b/c.txt"), "deep");
        assert_ack(fx, &o);
        assert!(fx.at("a/b").is_dir());
        assert_eq!(std::fs::read(fx.at("a/b/c.txt")).unwrap(), b"deep");
        assert_eq!(details(&o)["create_parents"], true);
    });
}

#[test]
fn create_parents_follows_an_inside_link_to_an_existing_directory() {
    both(|fx| {
        symlink("sub", fx.at("l")).unwrap();
        assert_ack(fx, &fx.write_parents(&fx.p("l/x/y.txt"), "y"));
        assert_eq!(std::fs::read(fx.at("sub/x/y.txt")).unwrap(), b"y");
        assert!(is_link(&fx.at("l")));
    });
}

#[test]
fn create_parents_through_a_link_to_outside_is_refused() {
    // JAIL.md §7 case 49.
    both(|fx| {
        symlink(&fx.o, fx.at("link2")).unwrap();
        let path = fx.p("link2/x/y");
        let o = fx.write_parents(&path, "x");
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &path,
            MessageType::FileWrite,
        );
        assert!(!exists(&fx.o.join("x")));
    });
}

#[test]
fn create_parents_with_a_file_in_the_way_is_internal_error() {
    both(|fx| {
        let o = fx.write_parents(&fx.p("f.txt/x/y"), "x");
        assert_error(fx, &o, ErrorCode::InternalError);
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
    });
}

#[test]
fn write_without_create_parents_into_a_missing_directory_is_not_found() {
    // JAIL.md §7 case 50.
    both(|fx| {
        let o = fx.write(&fx.p("missing/c.txt"), "x");
        assert_error(fx, &o, ErrorCode::PathNotFound);
        assert!(!exists(&fx.at("missing")));
        assert_eq!(details(&o)["size_bytes_written"], 0);
    });
}

#[test]
fn bad_base64_is_rejected_before_any_directory_is_created() {
    both(|fx| {
        let req = FileWrite {
            path: fx.p("newdir/x.bin"),
            content: "QUJD\nRA==".into(),
            encoding: Encoding::Base64,
            create_parents: true,
        };
        let o = files::write(&fx.ctx(), req);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(message(&o).starts_with("Bad base64:"), "{}", message(&o));
        assert!(!exists(&fx.at("newdir")));
    });
}

#[test]
fn oversize_content_is_rejected_before_any_directory_is_created() {
    both(|fx| {
        let req = write_req(&fx.p("newdir/x.txt"), "0123456789", true);
        let o = files::write(&fx.ctx_with(0o022, 9), req);
        assert_error(fx, &o, ErrorCode::FileTooLarge);
        assert_eq!(message(&o), "10 bytes exceeds limit 9");
        assert!(!exists(&fx.at("newdir")));
    });
}

#[test]
fn content_at_the_limit_is_written() {
    both(|fx| {
        let req = write_req(&fx.p("x.txt"), "0123456789", false);
        assert_ack(fx, &files::write(&fx.ctx_with(0o022, 10), req));
    });
}

#[test]
fn jail_refusal_comes_before_decoding() {
    both(|fx| {
        let req = FileWrite {
            path: "/etc/evil".into(),
            content: "!!!".into(),
            encoding: Encoding::Base64,
            create_parents: false,
        };
        let o = files::write(&fx.ctx(), req);
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            "/etc/evil",
            MessageType::FileWrite,
        );
    });
}

#[test]
fn writing_a_directory_is_internal_error() {
    both(|fx| {
        let o = fx.write(&fx.p("sub"), "x");
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(message(&o).starts_with("Could not write file:"));
        assert!(message(&o).to_lowercase().contains("is a directory"));
        assert!(fx.at("sub").is_dir());
    });
}

#[test]
fn writing_the_root_is_internal_error_is_a_directory() {
    both(|fx| {
        for path in [fx.p(""), String::new(), ".".into(), fx.p("sub/..")] {
            let o = fx.write(&path, "x");
            assert_error(fx, &o, ErrorCode::InternalError);
            assert!(
                message(&o).to_lowercase().contains("is a directory"),
                "{path}: {}",
                message(&o)
            );
        }
        assert!(fx.w.is_dir());
    });
}

#[test]
fn writing_a_fifo_is_internal_error_without_blocking() {
    both(|fx| {
        let fifo = fx.at("fifo");
        mkfifo(&fifo);
        // Should the write ever block on the FIFO, a reader opened by this
        // watchdog releases it, so the test fails instead of hanging.
        let done = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let done = Arc::clone(&done);
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    if done.load(Ordering::SeqCst) {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _reader = std::fs::File::open(&fifo);
                true
            })
        };
        let o = fx.write(&fx.p("fifo"), "x");
        done.store(true, Ordering::SeqCst);
        assert!(!watchdog.join().unwrap(), "the write blocked on the FIFO");
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(
            message(&o).contains("not a regular file"),
            "{}",
            message(&o)
        );
    });
}

#[test]
fn writing_through_a_symlink_loop_is_internal_error() {
    both(|fx| {
        symlink("b", fx.at("a")).unwrap();
        symlink("a", fx.at("b")).unwrap();
        let o = fx.write(&fx.p("a"), "x");
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(is_link(&fx.at("a")) && is_link(&fx.at("b")));
    });
}

#[test]
fn foreign_owned_single_link_file_keeps_its_owner_group_and_mode() {
    if !is_root() {
        println!("skipped: changing a file's owner needs root");
        return;
    }
    both(|fx| {
        let f = fx.at("f.txt");
        std::os::unix::fs::chown(&f, Some(4242), Some(4243)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let before = std::fs::metadata(&f).unwrap();
        assert_ack(fx, &fx.write(&fx.p("f.txt"), "replaced"));
        let after = std::fs::metadata(&f).unwrap();
        // Root gives the replacement to the old owner instead of writing in
        // place, so a failure can never leave a half-written file.
        assert_ne!(after.ino(), before.ino(), "replaced, not written in place");
        assert_eq!((after.uid(), after.gid()), (4242, 4243));
        assert_eq!(after.mode() & 0o7777, 0o640);
        assert_eq!(std::fs::read(&f).unwrap(), b"replaced");
        assert!(temp_files(&fx.w).is_empty());
    });
}

#[test]
fn foreign_owned_hard_linked_file_is_replaced_not_written_in_place() {
    if !is_root() {
        println!("skipped: changing a file's owner needs root");
        return;
    }
    both(|fx| {
        let f = fx.at("f.txt");
        std::os::unix::fs::chown(&f, Some(4242), Some(4243)).unwrap();
        std::fs::hard_link(&f, fx.at("twin")).unwrap();
        let before = std::fs::metadata(&f).unwrap();
        assert_ack(fx, &fx.write(&fx.p("f.txt"), "new"));
        let after = std::fs::metadata(&f).unwrap();
        assert_ne!(after.ino(), before.ino());
        assert_eq!(after.uid(), 0, "the replacement belongs to the writer");
        assert_eq!(after.gid(), 4243, "the group is kept where possible");
        assert_eq!(std::fs::read(fx.at("twin")).unwrap(), b"hello");
    });
}

#[test]
fn read_only_file_is_not_replaced() {
    if is_root() {
        println!("skipped: root bypasses file permissions");
        return;
    }
    both(|fx| {
        let f = fx.at("f.txt");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        let o = fx.write(&fx.p("f.txt"), "x");
        assert_error(fx, &o, ErrorCode::InternalError);
        assert_eq!(std::fs::read(&f).unwrap(), b"hello");
    });
}

// ---- FILE_DELETE -----------------------------------------------------------------

#[test]
fn delete_removes_a_file_and_audits_the_resolved_path() {
    both(|fx| {
        let o = fx.delete(&fx.p("f.txt"), false, false);
        assert_ack(fx, &o);
        assert!(!exists(&fx.at("f.txt")));
        let d = details(&o);
        assert_eq!(d["path"], fx.p("f.txt"));
        assert_eq!(d["recursive"], false);
        assert_eq!(d["missing_ok"], false);
    });
}

#[test]
fn delete_of_a_missing_path_is_not_found_unless_missing_ok() {
    both(|fx| {
        assert_error(
            fx,
            &fx.delete(&fx.p("nope"), false, false),
            ErrorCode::PathNotFound,
        );
        assert_error(
            fx,
            &fx.delete(&fx.p("nope/deeper"), true, false),
            ErrorCode::PathNotFound,
        );
        assert_ack(fx, &fx.delete(&fx.p("nope"), false, true));
        assert_ack(fx, &fx.delete(&fx.p("nope/deeper"), true, true));
    });
}

#[test]
fn delete_of_the_root_is_refused_however_it_is_spelled() {
    // JAIL.md §7 case 41 (and 35, 36).
    both(|fx| {
        let with_slash = format!("{}/", fx.p(""));
        for path in [
            fx.p(""),
            with_slash,
            String::new(),
            ".".into(),
            fx.p("sub/.."),
            fx.p("missing/.."),
        ] {
            let o = fx.delete(&path, true, true);
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &path,
                MessageType::FileDelete,
            );
            assert!(
                message(&o).contains("refusing to modify allowed_root itself"),
                "{}",
                message(&o)
            );
        }
        assert!(fx.at("sub").is_dir() && fx.at("f.txt").is_file());
    });
}

#[test]
fn delete_of_a_link_to_the_root_removes_only_the_link() {
    // JAIL.md §7 case 42.
    both(|fx| {
        symlink(&fx.w, fx.at("rootlink")).unwrap();
        assert_ack(fx, &fx.delete(&fx.p("rootlink"), true, false));
        assert!(!exists(&fx.at("rootlink")));
        assert!(fx.at("sub").is_dir() && fx.at("f.txt").is_file());
    });
}

#[test]
fn delete_of_a_hard_link_removes_only_the_name() {
    // JAIL.md §7 case 20.
    both(|fx| {
        std::fs::hard_link(fx.o.join("secret"), fx.at("h")).unwrap();
        assert_ack(fx, &fx.delete(&fx.p("h"), false, false));
        assert!(!exists(&fx.at("h")));
        assert_eq!(std::fs::read(fx.o.join("secret")).unwrap(), b"secret");
    });
}

#[test]
fn delete_of_an_inside_link_removes_the_link_not_the_target() {
    both(|fx| {
        symlink("f.txt", fx.at("ln")).unwrap();
        symlink("sub", fx.at("dl")).unwrap();
        assert_ack(fx, &fx.delete(&fx.p("ln"), false, false));
        assert_ack(fx, &fx.delete(&fx.p("dl"), true, false));
        assert!(!exists(&fx.at("ln")) && !exists(&fx.at("dl")));
        assert!(fx.at("f.txt").is_file() && fx.at("sub").is_dir());
    });
}

#[test]
fn delete_removes_dangling_and_looping_links() {
    // JAIL.md §7 case 15 (Rust acts on the entry).
    both(|fx| {
        symlink("nothing", fx.at("dangling")).unwrap();
        symlink("b", fx.at("a")).unwrap();
        symlink("a", fx.at("b")).unwrap();
        assert_ack(fx, &fx.delete(&fx.p("dangling"), false, false));
        assert_ack(fx, &fx.delete(&fx.p("a"), false, false));
        assert!(!exists(&fx.at("dangling")) && !exists(&fx.at("a")));
        assert!(is_link(&fx.at("b")));
    });
}

#[test]
fn delete_below_a_looping_link_is_not_found() {
    both(|fx| {
        symlink("b", fx.at("a")).unwrap();
        symlink("a", fx.at("b")).unwrap();
        assert_error(
            fx,
            &fx.delete(&fx.p("a/x"), false, false),
            ErrorCode::PathNotFound,
        );
        assert_ack(fx, &fx.delete(&fx.p("a/x"), false, true));
    });
}

#[test]
fn delete_of_a_link_resolving_outside_is_refused() {
    both(|fx| {
        symlink(&fx.o, fx.at("out")).unwrap();
        let o = fx.delete(&fx.p("out"), true, false);
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &fx.p("out"),
            MessageType::FileDelete,
        );
        assert!(is_link(&fx.at("out")));
    });
}

#[test]
fn delete_of_a_non_empty_directory_without_recursive_is_path_not_empty() {
    both(|fx| {
        std::fs::write(fx.at("sub/x"), "x").unwrap();
        let o = fx.delete(&fx.p("sub"), false, false);
        assert_error(fx, &o, ErrorCode::PathNotEmpty);
        assert!(fx.at("sub/x").is_file());
    });
}

#[test]
fn delete_of_an_empty_directory_without_recursive_removes_it() {
    both(|fx| {
        assert_ack(fx, &fx.delete(&fx.p("sub"), false, false));
        assert!(!exists(&fx.at("sub")));
    });
}

#[test]
fn rmdir_failure_other_than_not_empty_is_internal_error() {
    if is_root() {
        // EACCES cannot be provoked as root; EBUSY on a mount point can.
        let Some(_probe) = can_mount() else { return };
        both(|fx| {
            std::fs::create_dir(fx.at("mnt")).unwrap();
            let _m = Tmpfs::mount(&fx.at("mnt")).unwrap();
            let o = fx.delete(&fx.p("mnt"), false, false);
            assert_error(fx, &o, ErrorCode::InternalError);
            assert!(fx.at("mnt").is_dir());
        });
        return;
    }
    both(|fx| {
        std::fs::create_dir(fx.at("sub/inner")).unwrap();
        std::fs::set_permissions(fx.at("sub"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let o = fx.delete(&fx.p("sub/inner"), false, false);
        std::fs::set_permissions(fx.at("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_error(fx, &o, ErrorCode::InternalError);
    });
}

#[test]
fn recursive_delete_removes_a_tree_without_following_links() {
    both(|fx| {
        std::fs::create_dir_all(fx.at("tree/a/b/c")).unwrap();
        std::fs::write(fx.at("tree/a/b/c/deep.txt"), "d").unwrap();
        std::fs::write(fx.at("tree/a/file"), "f").unwrap();
        symlink(&fx.o, fx.at("tree/outdir")).unwrap();
        symlink(fx.o.join("secret"), fx.at("tree/a/outfile")).unwrap();
        symlink(fx.o.join("dir"), fx.at("tree/a/b/outsub")).unwrap();
        symlink("../../f.txt", fx.at("tree/a/inlink")).unwrap();
        symlink("loop", fx.at("tree/loop")).unwrap();
        mkfifo(&fx.at("tree/a/fifo"));
        let o = fx.delete(&fx.p("tree"), true, false);
        assert_ack(fx, &o);
        assert!(!exists(&fx.at("tree")));
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
        assert_eq!(details(&o)["recursive"], true);
        // The canary (checked by `both`) proves the outside links were not
        // followed.
    });
}

#[test]
fn recursive_delete_of_a_wide_directory() {
    both(|fx| {
        std::fs::create_dir(fx.at("wide")).unwrap();
        for i in 0..600 {
            std::fs::write(fx.at(&format!("wide/file-with-a-long-name-{i:04}")), "x").unwrap();
        }
        assert_ack(fx, &fx.delete(&fx.p("wide"), true, false));
        assert!(!exists(&fx.at("wide")));
    });
}

#[test]
fn recursive_delete_of_a_deep_tree_uses_no_recursion() {
    both(|fx| {
        let mut rel = String::from("deep");
        for _ in 0..200 {
            rel.push_str("/d");
        }
        std::fs::create_dir_all(fx.at(&rel)).unwrap();
        std::fs::write(fx.at(&format!("{rel}/leaf")), "x").unwrap();
        assert_ack(fx, &fx.delete(&fx.p("deep"), true, false));
        assert!(!exists(&fx.at("deep")));
    });
}

// ---- FILE_MOVE -------------------------------------------------------------------

#[test]
fn move_renames_a_file_and_audits_both_ends() {
    both(|fx| {
        let o = fx.mv(&fx.p("f.txt"), &fx.p("sub/g.txt"), false);
        assert_ack(fx, &o);
        assert!(!exists(&fx.at("f.txt")));
        assert_eq!(std::fs::read(fx.at("sub/g.txt")).unwrap(), b"hello");
        let d = details(&o);
        assert_eq!(d["src"], fx.p("f.txt"));
        assert_eq!(d["dst"], fx.p("sub/g.txt"));
        assert_eq!(d["overwrite"], false);
    });
}

#[test]
fn move_renames_a_directory() {
    both(|fx| {
        std::fs::write(fx.at("sub/x"), "x").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("sub"), &fx.p("moved"), false));
        assert_eq!(std::fs::read(fx.at("moved/x")).unwrap(), b"x");
        assert!(!exists(&fx.at("sub")));
    });
}

#[test]
fn move_of_the_root_is_refused() {
    // JAIL.md §7 case 43.
    both(|fx| {
        for src in [fx.p(""), String::new(), fx.p("sub/..")] {
            let dst = fx.p("sub/moved");
            let o = fx.mv(&src, &dst, false);
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &format!("{src} -> {dst}"),
                MessageType::FileMove,
            );
        }
        assert!(fx.at("sub").is_dir() && !exists(&fx.at("sub/moved")));
    });
}

#[test]
fn move_onto_the_root_is_refused_even_with_overwrite() {
    // JAIL.md §7 case 44.
    both(|fx| {
        for dst in [fx.p(""), ".".into(), fx.p("sub/..")] {
            let o = fx.mv(&fx.p("f.txt"), &dst, true);
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &format!("{} -> {dst}", fx.p("f.txt")),
                MessageType::FileMove,
            );
        }
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
        assert!(fx.at("sub").is_dir());
    });
}

#[test]
fn move_to_outside_is_refused_with_both_paths_in_the_violation() {
    // JAIL.md §7 case 51.
    both(|fx| {
        let dst = fx.o.join("evil").to_str().unwrap().to_owned();
        let o = fx.mv(&fx.p("f.txt"), &dst, false);
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &format!("{} -> {dst}", fx.p("f.txt")),
            MessageType::FileMove,
        );
        assert!(fx.at("f.txt").is_file());
    });
}

#[test]
fn move_from_outside_is_refused() {
    // JAIL.md §7 case 52.
    both(|fx| {
        let src = fx.o.join("secret").to_str().unwrap().to_owned();
        let o = fx.mv(&src, &fx.p("p"), false);
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &format!("{src} -> {}", fx.p("p")),
            MessageType::FileMove,
        );
        assert!(!exists(&fx.at("p")));
    });
}

#[test]
fn move_onto_a_dangling_link_pointing_outside_is_refused() {
    // JAIL.md §7 case 53.
    both(|fx| {
        symlink(fx.o.join("x"), fx.at("dl")).unwrap();
        for overwrite in [false, true] {
            let o = fx.mv(&fx.p("f.txt"), &fx.p("dl"), overwrite);
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &format!("{} -> {}", fx.p("f.txt"), fx.p("dl")),
                MessageType::FileMove,
            );
        }
        assert!(is_link(&fx.at("dl")) && fx.at("f.txt").is_file());
    });
}

#[test]
fn move_of_a_symlink_moves_the_link_entry() {
    // JAIL.md §7 case 54.
    both(|fx| {
        symlink("f.txt", fx.at("ln")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("ln"), &fx.p("sub/ln"), false));
        assert!(!exists(&fx.at("ln")));
        assert!(is_link(&fx.at("sub/ln")));
        assert_eq!(
            std::fs::read_link(fx.at("sub/ln")).unwrap(),
            Path::new("f.txt")
        );
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
    });
}

#[test]
fn move_onto_an_existing_entry_without_overwrite_is_path_exists() {
    both(|fx| {
        std::fs::write(fx.at("sub/g"), "g").unwrap();
        let o = fx.mv(&fx.p("f.txt"), &fx.p("sub/g"), false);
        assert_error(fx, &o, ErrorCode::PathExists);
        assert_eq!(std::fs::read(fx.at("sub/g")).unwrap(), b"g");
        assert!(fx.at("f.txt").is_file());
        // An inside link at the destination exists too (the entry counts).
        symlink("nothing", fx.at("dangling")).unwrap();
        let o = fx.mv(&fx.p("f.txt"), &fx.p("dangling"), false);
        assert_error(fx, &o, ErrorCode::PathExists);
    });
}

#[test]
fn move_with_overwrite_replaces_a_file() {
    both(|fx| {
        std::fs::write(fx.at("sub/g"), "g").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("f.txt"), &fx.p("sub/g"), true));
        assert_eq!(std::fs::read(fx.at("sub/g")).unwrap(), b"hello");
        assert!(!exists(&fx.at("f.txt")));
    });
}

#[test]
fn move_with_overwrite_replaces_a_non_empty_directory() {
    both(|fx| {
        std::fs::create_dir_all(fx.at("src/s")).unwrap();
        std::fs::write(fx.at("src/s/new"), "new").unwrap();
        std::fs::create_dir_all(fx.at("dst/old/deeper")).unwrap();
        std::fs::write(fx.at("dst/old/deeper/x"), "old").unwrap();
        symlink(&fx.o, fx.at("dst/outlink")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("src"), &fx.p("dst"), true));
        assert!(!exists(&fx.at("src")));
        assert_eq!(std::fs::read(fx.at("dst/s/new")).unwrap(), b"new");
        assert!(!exists(&fx.at("dst/old")));
    });
}

#[test]
fn move_with_overwrite_replaces_an_empty_directory() {
    both(|fx| {
        std::fs::create_dir(fx.at("d1")).unwrap();
        std::fs::write(fx.at("d1/x"), "x").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("d1"), &fx.p("sub"), true));
        assert_eq!(std::fs::read(fx.at("sub/x")).unwrap(), b"x");
    });
}

#[test]
fn move_with_overwrite_replaces_across_types() {
    both(|fx| {
        // file over a non-empty directory
        std::fs::write(fx.at("sub/x"), "x").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("f.txt"), &fx.p("sub"), true));
        assert_eq!(std::fs::read(fx.at("sub")).unwrap(), b"hello");
        // directory over a file
        std::fs::create_dir(fx.at("d")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("d"), &fx.p("sub"), true));
        assert!(fx.at("sub").is_dir());
        // directory over an inside symlink: the link goes, its target stays
        std::fs::write(fx.at("t.txt"), "t").unwrap();
        symlink("t.txt", fx.at("l")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("sub"), &fx.p("l"), true));
        assert!(fx.at("l").is_dir() && !is_link(&fx.at("l")));
        assert_eq!(std::fs::read(fx.at("t.txt")).unwrap(), b"t");
    });
}

#[test]
fn move_with_overwrite_replaces_an_inside_link_not_its_target() {
    both(|fx| {
        std::fs::write(fx.at("t.txt"), "t").unwrap();
        symlink("t.txt", fx.at("l")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("f.txt"), &fx.p("l"), true));
        assert!(!is_link(&fx.at("l")));
        assert_eq!(std::fs::read(fx.at("l")).unwrap(), b"hello");
        assert_eq!(std::fs::read(fx.at("t.txt")).unwrap(), b"t");
    });
}

#[test]
fn same_entry_move_is_a_no_op() {
    both(|fx| {
        for dst in [fx.p("f.txt"), fx.p("sub/../f.txt"), "f.txt".into()] {
            assert_ack(fx, &fx.mv(&fx.p("f.txt"), &dst, true));
            assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
        }
        // Without overwrite the existing destination is reported first.
        let o = fx.mv(&fx.p("f.txt"), &fx.p("f.txt"), false);
        assert_error(fx, &o, ErrorCode::PathExists);
        std::fs::write(fx.at("sub/x"), "x").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("sub"), &fx.p("sub"), true));
        assert!(fx.at("sub/x").is_file());
    });
}

#[test]
fn move_of_a_hard_link_onto_its_twin_leaves_one_name() {
    both(|fx| {
        std::fs::hard_link(fx.at("f.txt"), fx.at("twin")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("twin"), &fx.p("f.txt"), true));
        assert!(!exists(&fx.at("twin")));
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
    });
}

#[test]
fn move_of_a_missing_source_is_not_found() {
    both(|fx| {
        let o = fx.mv(&fx.p("nope"), &fx.p("x"), false);
        assert_error(fx, &o, ErrorCode::PathNotFound);
        assert!(!exists(&fx.at("x")));
    });
}

#[test]
fn move_into_a_missing_directory_is_not_found() {
    both(|fx| {
        let o = fx.mv(&fx.p("f.txt"), &fx.p("missing/x"), false);
        assert_error(fx, &o, ErrorCode::PathNotFound);
        assert!(fx.at("f.txt").is_file());
    });
}

#[test]
fn move_of_a_directory_into_itself_is_internal_error() {
    both(|fx| {
        std::fs::create_dir(fx.at("sub/inner")).unwrap();
        for overwrite in [false, true] {
            let o = fx.mv(&fx.p("sub"), &fx.p("sub/inner/moved"), overwrite);
            assert_error(fx, &o, ErrorCode::InternalError);
        }
        // With overwrite and an existing non-empty destination inside the
        // source, nothing is deleted first.
        std::fs::create_dir(fx.at("sub/inner/full")).unwrap();
        std::fs::write(fx.at("sub/inner/full/x"), "x").unwrap();
        let o = fx.mv(&fx.p("sub"), &fx.p("sub/inner/full"), true);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(fx.at("sub/inner/full/x").is_file());
    });
}

#[test]
fn move_over_an_ancestor_of_the_source_deletes_nothing() {
    both(|fx| {
        std::fs::write(fx.at("sub/x"), "x").unwrap();
        let o = fx.mv(&fx.p("sub/x"), &fx.p("sub"), true);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert_eq!(std::fs::read(fx.at("sub/x")).unwrap(), b"x");
    });
}

#[test]
fn move_of_a_link_resolving_outside_is_refused() {
    both(|fx| {
        symlink(fx.o.join("secret"), fx.at("out")).unwrap();
        let o = fx.mv(&fx.p("out"), &fx.p("moved"), false);
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &format!("{} -> {}", fx.p("out"), fx.p("moved")),
            MessageType::FileMove,
        );
        assert!(is_link(&fx.at("out")));
    });
}

#[test]
fn move_of_a_looping_link_moves_the_entry() {
    both(|fx| {
        symlink("b", fx.at("a")).unwrap();
        symlink("a", fx.at("b")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("a"), &fx.p("sub/a"), false));
        assert!(is_link(&fx.at("sub/a")) && !exists(&fx.at("a")));
    });
}

// ---- a second filesystem ---------------------------------------------------------

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Option<Tmpfs> {
        Tmpfs::mount_sized(at, "16m")
    }

    fn mount_sized(at: &Path, size: &str) -> Option<Tmpfs> {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .ok()?;
        status.success().then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `Some` when a tmpfs can be mounted here; prints why not otherwise.
fn can_mount() -> Option<()> {
    if !is_root() {
        println!("skipped: mounting a second filesystem needs root");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    if Tmpfs::mount(dir.path()).is_none() {
        println!("skipped: `mount -t tmpfs` is not permitted here");
        return None;
    }
    Some(())
}

/// Like [`both`], with a tmpfs mounted at `w/mnt` for the body.
fn both_with_mount(body: impl Fn(&Fx)) {
    if can_mount().is_none() {
        return;
    }
    both(|fx| {
        std::fs::create_dir(fx.at("mnt")).unwrap();
        let _m = Tmpfs::mount(&fx.at("mnt")).expect("tmpfs mount");
        body(fx);
    });
}

#[test]
fn recursive_delete_refuses_to_empty_a_mount_point() {
    // JAIL.md §7 case 62.
    both_with_mount(|fx| {
        std::fs::create_dir(fx.at("mnt/d")).unwrap();
        std::fs::write(fx.at("mnt/d/keep"), "k").unwrap();
        let o = fx.delete(&fx.p("mnt"), true, false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(
            message(&o).contains("refusing to cross a filesystem boundary"),
            "{}",
            message(&o)
        );
        assert_eq!(std::fs::read(fx.at("mnt/d/keep")).unwrap(), b"k");
    });
}

#[test]
fn recursive_delete_stops_at_a_mount_inside_the_tree() {
    if can_mount().is_none() {
        return;
    }
    both(|fx| {
        std::fs::create_dir_all(fx.at("tree/m")).unwrap();
        let _m = Tmpfs::mount(&fx.at("tree/m")).unwrap();
        std::fs::write(fx.at("tree/m/keep"), "k").unwrap();
        let o = fx.delete(&fx.p("tree"), true, false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(message(&o).contains("refusing to cross a filesystem boundary"));
        assert_eq!(std::fs::read(fx.at("tree/m/keep")).unwrap(), b"k");
    });
}

#[test]
fn cross_device_move_of_a_file_copies_content_mode_and_times() {
    both_with_mount(|fx| {
        let f = fx.at("f.txt");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mtime = std::fs::metadata(&f).unwrap().mtime();
        let o = fx.mv(&fx.p("f.txt"), &fx.p("mnt/f.txt"), false);
        assert_ack(fx, &o);
        assert!(!exists(&f));
        let meta = std::fs::metadata(fx.at("mnt/f.txt")).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        assert_eq!(meta.mtime(), mtime);
        assert_eq!(std::fs::read(fx.at("mnt/f.txt")).unwrap(), b"hello");
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn cross_device_move_of_a_large_file_copies_every_byte_in_order() {
    both_with_mount(|fx| {
        // Several copy chunks' worth (64 KiB each) of bytes that never
        // repeat at a chunk's distance: a chunk written at the wrong offset
        // changes the file.
        let content: Vec<u8> = (0u32..300_000)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        std::fs::write(fx.at("big"), &content).unwrap();
        let o = fx.mv(&fx.p("big"), &fx.p("mnt/big"), false);
        assert_ack(fx, &o);
        assert!(!exists(&fx.at("big")));
        assert_eq!(std::fs::read(fx.at("mnt/big")).unwrap(), content);
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn cross_device_move_of_a_tree_recreates_links_as_links() {
    both_with_mount(|fx| {
        std::fs::create_dir_all(fx.at("tree/a/b")).unwrap();
        std::fs::write(fx.at("tree/a/b/x"), "x").unwrap();
        std::fs::set_permissions(fx.at("tree/a"), std::fs::Permissions::from_mode(0o711)).unwrap();
        symlink(&fx.o, fx.at("tree/out")).unwrap();
        symlink("a/b/x", fx.at("tree/rel")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("tree"), &fx.p("mnt/tree"), false));
        assert!(!exists(&fx.at("tree")));
        assert_eq!(std::fs::read(fx.at("mnt/tree/a/b/x")).unwrap(), b"x");
        assert_eq!(std::fs::read_link(fx.at("mnt/tree/out")).unwrap(), fx.o);
        assert_eq!(
            std::fs::read_link(fx.at("mnt/tree/rel")).unwrap(),
            Path::new("a/b/x")
        );
        let mode = std::fs::metadata(fx.at("mnt/tree/a")).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o711);
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn cross_device_move_of_a_link_keeps_it_a_link() {
    both_with_mount(|fx| {
        symlink("f.txt", fx.at("ln")).unwrap();
        assert_ack(fx, &fx.mv(&fx.p("ln"), &fx.p("mnt/ln"), false));
        assert!(is_link(&fx.at("mnt/ln")) && !exists(&fx.at("ln")));
        assert!(fx.at("f.txt").is_file());
    });
}

#[test]
fn cross_device_move_with_a_special_file_aborts_and_cleans_up() {
    both_with_mount(|fx| {
        std::fs::create_dir(fx.at("tree")).unwrap();
        std::fs::write(fx.at("tree/x"), "x").unwrap();
        mkfifo(&fx.at("tree/fifo"));
        let o = fx.mv(&fx.p("tree"), &fx.p("mnt/tree"), false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(fx.at("tree/x").is_file(), "the source is untouched");
        assert!(!exists(&fx.at("mnt/tree")));
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn cross_device_move_with_overwrite_replaces_only_after_copying() {
    both_with_mount(|fx| {
        std::fs::create_dir(fx.at("mnt/dst")).unwrap();
        std::fs::write(fx.at("mnt/dst/old"), "old").unwrap();
        // A special file makes the copy fail: the destination must survive.
        std::fs::create_dir(fx.at("bad")).unwrap();
        mkfifo(&fx.at("bad/fifo"));
        let o = fx.mv(&fx.p("bad"), &fx.p("mnt/dst"), true);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert_eq!(std::fs::read(fx.at("mnt/dst/old")).unwrap(), b"old");
        // A good source replaces it.
        std::fs::create_dir(fx.at("good")).unwrap();
        std::fs::write(fx.at("good/new"), "new").unwrap();
        assert_ack(fx, &fx.mv(&fx.p("good"), &fx.p("mnt/dst"), true));
        assert_eq!(std::fs::read(fx.at("mnt/dst/new")).unwrap(), b"new");
        assert!(!exists(&fx.at("mnt/dst/old")) && !exists(&fx.at("good")));
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn cross_device_move_without_overwrite_onto_an_existing_entry_is_path_exists() {
    both_with_mount(|fx| {
        std::fs::write(fx.at("mnt/f.txt"), "there").unwrap();
        let o = fx.mv(&fx.p("f.txt"), &fx.p("mnt/f.txt"), false);
        assert_error(fx, &o, ErrorCode::PathExists);
        assert_eq!(std::fs::read(fx.at("mnt/f.txt")).unwrap(), b"there");
        assert!(fx.at("f.txt").is_file());
    });
}

#[test]
fn moving_a_mount_point_is_refused() {
    both_with_mount(|fx| {
        std::fs::write(fx.at("mnt/keep"), "k").unwrap();
        let o = fx.mv(&fx.p("mnt"), &fx.p("sub/mnt"), false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert_eq!(std::fs::read(fx.at("mnt/keep")).unwrap(), b"k");
    });
}

#[test]
fn failed_write_removes_its_temp_file_and_keeps_the_old_content() {
    if can_mount().is_none() {
        return;
    }
    both(|fx| {
        std::fs::create_dir(fx.at("small")).unwrap();
        let _m = Tmpfs::mount_sized(&fx.at("small"), "64k").unwrap();
        std::fs::write(fx.at("small/f"), "old").unwrap();
        let big = "x".repeat(512 * 1024);
        for name in ["small/f", "small/new"] {
            let o = fx.write(&fx.p(name), &big);
            assert_error(fx, &o, ErrorCode::InternalError);
            assert!(
                message(&o).starts_with("Could not write file:"),
                "{}",
                message(&o)
            );
            assert!(temp_files(&fx.at("small")).is_empty());
        }
        assert_eq!(std::fs::read(fx.at("small/f")).unwrap(), b"old");
        assert!(!exists(&fx.at("small/new")));
    });
}

#[test]
fn foreign_owned_file_survives_a_failed_write_and_keeps_its_owner() {
    if can_mount().is_none() {
        return;
    }
    both(|fx| {
        std::fs::create_dir(fx.at("small")).unwrap();
        let _m = Tmpfs::mount_sized(&fx.at("small"), "64k").unwrap();
        let f = fx.at("small/f");
        std::fs::write(&f, "old content").unwrap();
        std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
        let free = || rustix::fs::statvfs(fx.at("small")).unwrap().f_bfree;
        let before = free();
        let o = fx.write(&fx.p("small/f"), &"x".repeat(512 * 1024));
        assert_error(fx, &o, ErrorCode::InternalError);
        // The temporary file's space comes back once its last descriptor is
        // closed. Other tests of this binary fork `mount` and `umount`, and a
        // forked child holds a copy of every descriptor until it execs, so
        // the space may come back a moment late, but it must come back.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while free() < before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            free(),
            before,
            "the failed write's space was not given back"
        );
        assert!(
            message(&o).starts_with("Could not write file:"),
            "{}",
            message(&o)
        );
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"old content");
        assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
        assert!(temp_files(&fx.at("small")).is_empty());
        assert_ack(fx, &fx.write(&fx.p("small/f"), "new"));
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
        assert_eq!(meta.mode() & 0o7777, 0o664);
    });
}

/// Set in the child process of the in-place write test: the jail root the
/// child works in (and `…_WALKER` the resolver).
const IN_PLACE_CHILD: &str = "AUTOGPT_SHIM_TEST_IN_PLACE_ROOT";
const IN_PLACE_WALKER: &str = "AUTOGPT_SHIM_TEST_IN_PLACE_WALKER";

#[test]
fn in_place_write_of_a_foreign_file_reserves_space_before_touching_it() {
    // Only a writer that cannot give files away writes in place, so the
    // writes run in a child process of this test binary as `nobody`.
    if let Some(w) = std::env::var_os(IN_PLACE_CHILD) {
        in_place_child(Path::new(&w));
        return;
    }
    if can_mount().is_none() {
        return;
    }
    for walker in [false, true] {
        let fx = Fx::new(walker);
        let base = fx.w.parent().unwrap();
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(fx.at("small")).unwrap();
        let _m = Tmpfs::mount_sized(&fx.at("small"), "2m").unwrap();
        let f = fx.at("small/f");
        std::fs::write(&f, "old content").unwrap();
        std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let before = std::fs::metadata(&f).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "in_place_write_of_a_foreign_file_reserves_space_before_touching_it",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(IN_PLACE_CHILD, &fx.w)
            .env(IN_PLACE_WALKER, if walker { "1" } else { "0" })
            .uid(65534)
            .gid(65534)
            .output();
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                println!("skipped: cannot run the test binary as nobody: {e}");
                return;
            }
        };
        assert!(
            out.status.success(),
            "[{}] child failed:\n{}\n{}",
            fx.label(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let after = std::fs::metadata(&f).unwrap();
        assert_eq!(
            after.ino(),
            before.ino(),
            "[{}] written in place",
            fx.label()
        );
        assert_eq!((after.uid(), after.gid()), (1000, 1000));
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        drop(_m);
        assert_eq!(snapshot(&fx.o), fx.canary);
    }
}

/// The child's part: an oversized in-place write fails before touching the
/// file (the reservation fails), a fitting one succeeds.
fn in_place_child(w: &Path) {
    assert!(!is_root(), "the child must not run as root");
    let walker = std::env::var_os(IN_PLACE_WALKER).is_some_and(|v| v == "1");
    let jail = Jail::pin(
        w,
        JailOptions {
            force_walker: walker,
            ..Default::default()
        },
    )
    .unwrap();
    // The file system (2 MiB) is smaller than the size limit.
    let ctx = FileContext {
        max_file_size_bytes: 8 << 20,
        ..ctx_of(&jail)
    };
    let f = w.join("small/f");
    let path = f.to_str().unwrap();
    let o = files::write(&ctx, write_req(path, &"x".repeat(4 << 20), false));
    let err = o.reply.expect_err("an oversized write must fail");
    assert_eq!(err.code(), ErrorCode::InternalError, "{}", err.message());
    assert!(
        err.message().starts_with("Could not write file:"),
        "{}",
        err.message()
    );
    assert_eq!(std::fs::read(&f).unwrap(), b"old content");
    // A content of several pieces, decoded as it is written in place.
    let raw: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
    let req = FileWrite {
        path: path.to_owned(),
        content: files::base64::encode(&raw),
        encoding: Encoding::Base64,
        create_parents: false,
    };
    assert_eq!(files::write(&ctx, req).reply, Ok(Message::Ack(Ack::OK)));
    assert!(std::fs::read(&f).unwrap() == raw);
    let o = files::write(&ctx, write_req(path, "new", false));
    assert_eq!(o.reply, Ok(Message::Ack(Ack::OK)));
}

// ---- jail_no_xdev at the final entry ---------------------------------------------

/// A bind or overlay mount for one test, unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn bind(from: &Path, at: &Path) -> Option<Mounted> {
        let status = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .status()
            .ok()?;
        status.success().then(|| Mounted(at.to_path_buf()))
    }

    /// An overlay of `base/lower` (upper and work directories beside it)
    /// at `base/ov`. With `redirect_dir=off` renaming a directory of the
    /// lower layer fails with `EXDEV` although both names are on one mount.
    fn overlay(base: &Path) -> Option<Mounted> {
        for d in ["upper", "work", "ov"] {
            std::fs::create_dir_all(base.join(d)).ok()?;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir=off",
            base.join("lower").display(),
            base.join("upper").display(),
            base.join("work").display()
        );
        let status = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(base.join("ov"))
            .status()
            .ok()?;
        status.success().then(|| Mounted(base.join("ov")))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `Some` when bind mounts can be made here; prints why not otherwise.
fn can_bind() -> Option<()> {
    if !is_root() {
        println!("skipped: bind mounts need root");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), "a").unwrap();
    std::fs::write(dir.path().join("b"), "b").unwrap();
    if Mounted::bind(&dir.path().join("a"), &dir.path().join("b")).is_none() {
        println!("skipped: `mount --bind` is not permitted here");
        return None;
    }
    Some(())
}

/// Like [`both`], with the outside file `o/secret` (owned by uid 1000)
/// bind-mounted at `w/mounted.txt` and the outside directory `o/dir` at
/// `w/md` — the same filesystem, so only the mount tells them apart.
fn both_with_binds(body: impl Fn(&Fx)) {
    if can_bind().is_none() {
        return;
    }
    both(|fx| {
        std::os::unix::fs::chown(fx.o.join("secret"), Some(1000), Some(1000)).unwrap();
        std::fs::write(fx.at("mounted.txt"), "placeholder").unwrap();
        std::fs::create_dir(fx.at("md")).unwrap();
        let _f = Mounted::bind(&fx.o.join("secret"), &fx.at("mounted.txt")).expect("bind file");
        let _d = Mounted::bind(&fx.o.join("dir"), &fx.at("md")).expect("bind directory");
        body(fx);
    });
}

#[test]
fn no_xdev_write_onto_a_bind_mounted_file_is_a_violation() {
    both_with_binds(|fx| {
        let jail = fx.no_xdev_jail();
        let path = fx.p("mounted.txt");
        let o = files::write(&ctx_of(&jail), write_req(&path, "pwned", false));
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &path,
            MessageType::FileWrite,
        );
        assert!(message(&o).contains("jail_no_xdev"), "{}", message(&o));
        assert_eq!(std::fs::read(fx.o.join("secret")).unwrap(), b"secret");
        assert!(temp_files(&fx.w).is_empty());
    });
}

#[test]
fn no_xdev_create_parents_through_a_bind_mount_is_a_violation_and_creates_nothing() {
    both_with_binds(|fx| {
        let jail = fx.no_xdev_jail();
        let path = fx.p("md/new/x.txt");
        let o = files::write(&ctx_of(&jail), write_req(&path, "x", true));
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &path,
            MessageType::FileWrite,
        );
        assert!(!exists(&fx.o.join("dir/new")));
    });
}

#[test]
fn no_xdev_move_of_a_bind_mounted_file_is_a_violation() {
    both_with_binds(|fx| {
        let jail = fx.no_xdev_jail();
        let ctx = ctx_of(&jail);
        let mv = |src: &str, dst: &str, overwrite: bool| {
            files::move_entry(
                &ctx,
                &FileMove {
                    src: src.to_owned(),
                    dst: dst.to_owned(),
                    overwrite,
                },
            )
        };
        // As the source: nothing is copied in.
        let (src, dst) = (fx.p("mounted.txt"), fx.p("sub/copy.txt"));
        let o = mv(&src, &dst, false);
        let both_paths = format!("{src} -> {dst}");
        assert_violation(
            fx,
            &o,
            ErrorCode::PathOutsideAllowedRoot,
            &both_paths,
            MessageType::FileMove,
        );
        assert!(!exists(&fx.at("sub/copy.txt")));
        // As the destination, and a bind-mounted directory as the source.
        for (src, dst) in [
            (fx.p("f.txt"), fx.p("mounted.txt")),
            (fx.p("md"), fx.p("sub/md")),
        ] {
            let o = mv(&src, &dst, true);
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &format!("{src} -> {dst}"),
                MessageType::FileMove,
            );
        }
        assert_eq!(std::fs::read(fx.at("f.txt")).unwrap(), b"hello");
        assert!(!exists(&fx.at("sub/md")));
    });
}

#[test]
fn no_xdev_stat_without_following_a_bind_mount_is_a_violation() {
    both_with_binds(|fx| {
        let jail = fx.no_xdev_jail();
        for name in ["mounted.txt", "md"] {
            let path = fx.p(name);
            let o = files::stat(
                &ctx_of(&jail),
                &FileStat {
                    path: path.clone(),
                    follow_symlinks: false,
                },
            );
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &path,
                MessageType::FileStat,
            );
        }
        // Without jail_no_xdev the mounted object is reported (documented).
        let o = fx.stat(&fx.p("mounted.txt"), false);
        assert!(o.reply.is_ok(), "{o:?}");
    });
}

#[test]
fn no_xdev_delete_of_a_bind_mount_is_a_violation() {
    both_with_binds(|fx| {
        let jail = fx.no_xdev_jail();
        for (name, recursive) in [("mounted.txt", false), ("md", true), ("md", false)] {
            let path = fx.p(name);
            let o = files::delete(
                &ctx_of(&jail),
                &FileDelete {
                    path: path.clone(),
                    recursive,
                    missing_ok: false,
                },
            );
            assert_violation(
                fx,
                &o,
                ErrorCode::PathOutsideAllowedRoot,
                &path,
                MessageType::FileDelete,
            );
        }
        assert_eq!(std::fs::read(fx.o.join("dir/inner.txt")).unwrap(), b"inner");
    });
}

#[test]
fn recursive_delete_refuses_a_same_filesystem_bind_mount_inside_the_tree() {
    if can_bind().is_none() {
        return;
    }
    both(|fx| {
        std::fs::create_dir_all(fx.at("tree/m")).unwrap();
        let _b = Mounted::bind(&fx.o.join("dir"), &fx.at("tree/m")).unwrap();
        let o = fx.delete(&fx.p("tree"), true, false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(
            message(&o).contains("refusing to cross a filesystem boundary"),
            "{}",
            message(&o)
        );
        assert_eq!(std::fs::read(fx.at("tree/m/inner.txt")).unwrap(), b"inner");
    });
}

#[test]
fn moving_a_bind_mounted_file_is_refused_and_copies_nothing() {
    both_with_binds(|fx| {
        let o = fx.mv(&fx.p("mounted.txt"), &fx.p("sub/copy.txt"), false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(message(&o).contains("mount point"), "{}", message(&o));
        assert!(!exists(&fx.at("sub/copy.txt")));
        assert!(temp_files(&fx.at("sub")).is_empty());
    });
}

#[test]
fn copying_move_refuses_a_bind_mounted_file_inside_the_tree() {
    // A move falls back to copying on one mount too: an overlay refuses to
    // rename a directory of its lower layer (EXDEV). The jail root lies on
    // the overlay, so jail_no_xdev allows the move itself.
    if can_bind().is_none() {
        return;
    }
    for walker in [false, true] {
        let label = if walker { "walker" } else { "openat2" };
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let o = base.join("o");
        std::fs::create_dir(&o).unwrap();
        std::fs::write(o.join("secret"), "secret").unwrap();
        for tree in ["lower/w/tree", "lower/w/plain"] {
            std::fs::create_dir_all(base.join(tree)).unwrap();
            std::fs::write(base.join(tree).join("file"), "inside").unwrap();
        }
        std::fs::write(base.join("lower/w/tree/mounted"), "placeholder").unwrap();
        let Some(_ov) = Mounted::overlay(&base) else {
            println!("skipped: overlay mounts are not permitted here");
            return;
        };
        let w = base.join("ov/w");
        std::fs::create_dir(w.join("sub")).unwrap();
        let _b = Mounted::bind(&o.join("secret"), &w.join("tree/mounted")).unwrap();
        let jail = Jail::pin(
            &w,
            JailOptions {
                force_walker: walker,
                no_xdev: true,
                ..Default::default()
            },
        )
        .unwrap();
        let ctx = ctx_of(&jail);
        let mv = |src: &str, dst: &str| {
            let (src, dst) = (
                format!("{}/{src}", w.display()),
                format!("{}/{dst}", w.display()),
            );
            let out = files::move_entry(
                &ctx,
                &FileMove {
                    src: src.clone(),
                    dst: dst.clone(),
                    overwrite: false,
                },
            );
            (out, format!("{src} -> {dst}"))
        };
        // Without a mount in it, the copying move works.
        let (out, _) = mv("plain", "sub/plain");
        assert_eq!(out.reply, Ok(Message::Ack(Ack::OK)), "[{label}]");
        assert_eq!(std::fs::read(w.join("sub/plain/file")).unwrap(), b"inside");
        assert!(std::fs::symlink_metadata(w.join("plain")).is_err());
        // With a bind-mounted file in it, nothing is copied.
        let (out, both_paths) = mv("tree", "sub/tree");
        assert_eq!(
            out.reply.as_ref().map_err(OperationError::code),
            Err(ErrorCode::PathOutsideAllowedRoot),
            "[{label}] {out:?}"
        );
        assert_eq!(
            out.audit,
            Audit::JailViolation {
                rejection: RejectionKind::OutsideRoot,
                path: both_paths,
                attempted_op: MessageType::FileMove,
            },
            "[{label}]"
        );
        assert!(!exists(&w.join("sub/tree")), "[{label}]");
        assert!(temp_files(&w.join("sub")).is_empty(), "[{label}]");
        assert_eq!(std::fs::read(w.join("tree/file")).unwrap(), b"inside");
        // Without jail_no_xdev the mount is not a violation, but it is not
        // copied either (its source could not be removed afterwards).
        let plain_jail = Jail::pin(
            &w,
            JailOptions {
                force_walker: walker,
                ..Default::default()
            },
        )
        .unwrap();
        let out = files::move_entry(
            &ctx_of(&plain_jail),
            &FileMove {
                src: format!("{}/tree", w.display()),
                dst: format!("{}/sub/tree", w.display()),
                overwrite: false,
            },
        );
        let err = out.reply.expect_err("the move must fail");
        assert_eq!(err.code(), ErrorCode::InternalError, "[{label}]");
        assert!(
            err.message()
                .contains("refusing to cross a filesystem boundary"),
            "[{label}] {}",
            err.message()
        );
        assert!(!exists(&w.join("sub/tree")), "[{label}]");
        assert!(temp_files(&w.join("sub")).is_empty(), "[{label}]");
        drop(_b);
        assert_eq!(std::fs::read(o.join("secret")).unwrap(), b"secret");
    }
}

// ---- depth, loops, create_parents -----------------------------------------------

#[test]
fn cross_device_move_of_a_tree_deeper_than_the_copy_limit_is_refused_untouched() {
    both_with_mount(|fx| {
        let mut rel = String::from("deep");
        for _ in 0..300 {
            rel.push_str("/d");
        }
        std::fs::create_dir_all(fx.at(&rel)).unwrap();
        std::fs::write(fx.at(&format!("{rel}/leaf")), "x").unwrap();
        let o = fx.mv(&fx.p("deep"), &fx.p("mnt/deep"), false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(message(&o).contains("deeper than 256"), "{}", message(&o));
        assert_eq!(std::fs::read(fx.at(&format!("{rel}/leaf"))).unwrap(), b"x");
        assert!(!exists(&fx.at("mnt/deep")));
        assert!(temp_files(&fx.at("mnt")).is_empty());
    });
}

#[test]
fn stat_without_following_below_a_symlink_loop_is_internal_error() {
    both(|fx| {
        symlink("b", fx.at("a")).unwrap();
        symlink("a", fx.at("b")).unwrap();
        let o = fx.stat(&fx.p("a/x"), false);
        assert_error(fx, &o, ErrorCode::InternalError);
        assert!(
            message(&o).contains("Too many levels of symbolic links"),
            "{}",
            message(&o)
        );
    });
}

#[test]
fn create_parents_creates_a_long_chain_of_directories() {
    both(|fx| {
        let mut rel = String::from("chain");
        for i in 0..300 {
            rel.push_str(&format!("/{}", i % 10));
        }
        let file = format!("{rel}/leaf.txt");
        assert_ack(fx, &fx.write_parents(&fx.p(&file), "leaf"));
        assert_eq!(std::fs::read(fx.at(&file)).unwrap(), b"leaf");
        assert!(fx.at(&rel).is_dir());
    });
}

// ---- JAIL.md §7 cases 25 and 39 for the mutating operations ----------------------------

#[test]
fn nul_and_unknown_user_are_invalid_chars_for_every_mutating_op() {
    both(|fx| {
        for bad in [fx.p("a\0b"), "~nosuchuser-for-tests/x".to_owned()] {
            let out = fx.write(&bad, "x");
            assert_violation(
                fx,
                &out,
                ErrorCode::PathInvalidChars,
                &bad,
                MessageType::FileWrite,
            );
            let out = fx.write_parents(&bad, "x");
            assert_violation(
                fx,
                &out,
                ErrorCode::PathInvalidChars,
                &bad,
                MessageType::FileWrite,
            );
            let out = fx.delete(&bad, true, true);
            assert_violation(
                fx,
                &out,
                ErrorCode::PathInvalidChars,
                &bad,
                MessageType::FileDelete,
            );
            let src = fx.p("f.txt");
            let out = fx.mv(&src, &bad, true);
            let joined = format!("{src} -> {bad}");
            assert_violation(
                fx,
                &out,
                ErrorCode::PathInvalidChars,
                &joined,
                MessageType::FileMove,
            );
        }
        assert_eq!(std::fs::read_to_string(fx.at("f.txt")).unwrap(), "hello");
    });
}
