//! The request limits of FILE_LIST (FILES.md §4.2, §4.4) that are argument
//! errors: answered after the jail and the not-a-directory checks, before any
//! listing, with an operation audit record rather than a jail violation.
//! Real directories in a temporary tree, against both enforcement resolvers.

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use autogpt_shim::daemon::OperationError;
use autogpt_shim::files::{self, Audit, FileContext, FileOutcome, MAX_GLOB_CHARS};
use autogpt_shim::jail::{Jail, JailOptions, Resolver};
use autogpt_shim::protocol::{ErrorCode, FileList, Message};
use rustix::fs::Mode;
use serde_json::json;

struct Fx {
    _tmp: tempfile::TempDir,
    /// Canonical root `/w`, holding `sub/` and `f.txt`.
    w: PathBuf,
}

impl Fx {
    fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(tmp.path()).unwrap().join("w");
        std::fs::create_dir_all(w.join("sub")).unwrap();
        std::fs::write(w.join("f.txt"), "hello").unwrap();
        Fx { _tmp: tmp, w }
    }

    fn w(&self, rel: &str) -> String {
        format!("{}/{rel}", self.w.display())
    }

    fn jail(&self, walker: bool) -> Jail {
        let jail = Jail::pin(
            &self.w,
            JailOptions {
                force_walker: walker,
                ..Default::default()
            },
        )
        .unwrap();
        if walker {
            assert_eq!(jail.resolver(), Resolver::Walker);
        }
        jail
    }
}

fn ctx(jail: &Jail) -> FileContext<'_> {
    FileContext {
        jail,
        max_file_size_bytes: 10 * 1024 * 1024,
        refuse_multilink_reads: false,
        umask: Mode::from_raw_mode(0o022),
    }
}

/// Runs a test body against both resolvers, each with a fresh tree.
fn both(body: impl Fn(&Fx, &Jail)) {
    for walker in [false, true] {
        let fx = Fx::new();
        let jail = fx.jail(walker);
        body(&fx, &jail);
    }
}

fn list_req(path: &str, glob: &str) -> FileList {
    FileList {
        path: path.into(),
        glob: Some(glob.into()),
        recursive: false,
        include_hidden: false,
        max_entries: 1000,
    }
}

fn error(out: &FileOutcome) -> (ErrorCode, String) {
    match &out.reply {
        Err(e) => (e.code(), e.message().to_owned()),
        Ok(m) => panic!("expected an error, got {m:?}"),
    }
}

fn entry_names(out: &FileOutcome) -> Vec<String> {
    match &out.reply {
        Ok(Message::FileListResponse(r)) => r.entries.iter().map(|e| e.name.clone()).collect(),
        other => panic!("expected a listing, got {other:?}"),
    }
}

#[test]
fn list_refuses_a_glob_longer_than_the_limit_as_an_argument_error() {
    both(|fx, jail| {
        let glob = "*".repeat(MAX_GLOB_CHARS + 1);
        let out = files::list(&ctx(jail), &list_req(&fx.w("sub"), &glob));
        assert_eq!(
            error(&out),
            (
                ErrorCode::InternalError,
                "glob longer than 1024 characters".to_owned()
            )
        );
        let Audit::Operation(details) = &out.audit else {
            panic!("expected an operation record, got {:?}", out.audit);
        };
        let details = details.to_map();
        assert_eq!(details["path"], json!(fx.w("sub")));
        assert_eq!(details["entries_returned"], json!(0));
    });
}

#[test]
fn list_accepts_a_glob_of_exactly_the_limit() {
    both(|fx, jail| {
        // 1,024 stars are one `*`: every visible entry matches.
        let glob = "*".repeat(MAX_GLOB_CHARS);
        let out = files::list(&ctx(jail), &list_req(&fx.w(""), &glob));
        assert_eq!(entry_names(&out), ["f.txt", "sub"]);
    });
}

#[test]
fn not_a_directory_is_reported_before_the_glob_length() {
    both(|fx, jail| {
        let glob = "*".repeat(MAX_GLOB_CHARS + 1);
        let out = files::list(&ctx(jail), &list_req(&fx.w("f.txt"), &glob));
        let (code, message) = error(&out);
        assert_eq!(code, ErrorCode::InternalError);
        assert!(message.contains("is not a directory"), "{message}");
    });
}

#[test]
fn jail_refusal_is_reported_before_the_glob_length() {
    both(|_, jail| {
        let glob = "*".repeat(MAX_GLOB_CHARS + 1);
        let out = files::list(&ctx(jail), &list_req("/etc", &glob));
        assert_eq!(error(&out).0, ErrorCode::PathOutsideAllowedRoot);
        assert!(matches!(out.audit, Audit::JailViolation { .. }));
    });
}
