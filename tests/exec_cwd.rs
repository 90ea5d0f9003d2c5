//! EXEC.md §3 steps 6/6a and JAIL.md §4.4/§6.6: the working directory goes
//! through the jail, is opened as a directory descriptor and entered with
//! `fchdir`; refusals are `JAIL_VIOLATION`s, missing directories
//! `PATH_NOT_FOUND`, files `INTERNAL_ERROR`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exec_support;

use autogpt_shim::daemon::OperationError;
use autogpt_shim::files::Audit;
use autogpt_shim::jail::RejectionKind;
use autogpt_shim::protocol::{ErrorCode, MessageType};
use exec_support::*;

#[test]
fn default_cwd_is_the_root() {
    let fx = Fx::new();
    for cwd in [None, Some(String::new())] {
        let mut req = argv(&["pwd", "-P"]);
        req.cwd = cwd;
        let out = fx.run(&req);
        assert_eq!(result(&out).stdout, format!("{}\n", fx.root_str()));
        assert_eq!(record(&out).0["cwd"], fx.root_str());
    }
}

#[test]
fn relative_and_absolute_cwd_inside_the_root() {
    let fx = Fx::new();
    let sub = format!("{}/sub", fx.root_str());
    for cwd in ["sub", sub.as_str(), "sub/../sub/."] {
        let mut req = command("pwd -P");
        req.cwd = Some(cwd.into());
        let out = fx.run(&req);
        assert_eq!(result(&out).stdout, format!("{sub}\n"), "{cwd}");
        assert_eq!(record(&out).0["cwd"], sub.as_str());
    }
}

#[test]
fn cwd_outside_the_root_is_a_jail_violation_only() {
    let fx = Fx::new();
    let marker = fx.outside.join("ran");
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("link-out")).unwrap();
    for cwd in ["../outside", fx.outside.to_str().unwrap(), "link-out"] {
        let mut req = command(&format!("touch {}", marker.display()));
        req.cwd = Some(cwd.into());
        let out = fx.run(&req);
        let e = error(&out);
        assert_eq!(e.code(), ErrorCode::PathOutsideAllowedRoot, "{cwd}");
        assert_eq!(
            out.audit,
            Audit::JailViolation {
                rejection: RejectionKind::OutsideRoot,
                path: cwd.to_owned(),
                attempted_op: MessageType::ExecuteCommand,
            }
        );
        assert!(!marker.exists());
    }
}

#[test]
fn symlink_inside_the_root_is_followed() {
    let fx = Fx::new();
    std::os::unix::fs::symlink("sub", fx.root.join("link-in")).unwrap();
    let mut req = argv(&["pwd", "-P"]);
    req.cwd = Some("link-in".into());
    let out = fx.run(&req);
    let sub = format!("{}/sub", fx.root_str());
    assert_eq!(result(&out).stdout, format!("{sub}\n"));
    assert_eq!(record(&out).0["cwd"], sub.as_str());
}

#[test]
fn missing_cwd_is_path_not_found() {
    let fx = Fx::new();
    let mut req = command("true");
    req.cwd = Some("nope/deeper".into());
    let out = fx.run(&req);
    assert_eq!(error(&out).code(), ErrorCode::PathNotFound);
    let (details, result) = record(&out);
    assert_eq!(result.error_code.as_deref(), Some("PATH_NOT_FOUND"));
    assert_eq!(details["cwd"], format!("{}/nope/deeper", fx.root_str()));
}

#[test]
fn cwd_that_is_a_file_is_an_internal_error() {
    let fx = Fx::new();
    std::fs::write(fx.root.join("file"), "x").unwrap();
    let mut req = command("true");
    req.cwd = Some("file".into());
    let out = fx.run(&req);
    let e = error(&out);
    assert_eq!(e.code(), ErrorCode::InternalError);
    assert!(e.message().contains("Not a directory"), "{}", e.message());
    assert_eq!(record(&out).1.error_code.as_deref(), Some("INTERNAL_ERROR"));
}
