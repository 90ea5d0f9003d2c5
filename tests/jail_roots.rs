//! Which directories may be a jail root (CLI.md §8): the dangerous-root list
//! and the legacy-mode preparation of `allowed_root`, on real temporary
//! trees. Every test passes its own home directory, never the real one (the
//! tests may run with `HOME=/root`, which is on the system list as well).

// Test fixtures fail loudly by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use autogpt_shim::jail::{
    Inspected, PreparedRoot, RootProblem, check_dangerous, inspect_legacy_root, prepare_legacy_root,
};
use rustix::fs::Access;

/// A canonical temporary tree with a home directory `<tmp>/home/alice`.
struct Fx {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
}

impl Fx {
    fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let home = base.join("home/alice");
        std::fs::create_dir_all(&home).unwrap();
        Fx {
            _tmp: tmp,
            base,
            home,
        }
    }

    fn prepare(&self, configured: &Path, is_default: bool) -> Result<PreparedRoot, RootProblem> {
        prepare_legacy_root(configured, is_default, &self.home, false)
    }
}

/// A home that does not exist, for the pure checks: nothing on the system
/// lists is its ancestor except `/`.
const NO_HOME: &str = "/nonexistent-home/alice";

fn check(path: &str) -> Result<(), RootProblem> {
    check_dangerous(Path::new(path), Path::new(NO_HOME))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn filesystem_root_is_refused() {
    let problem = check("/").unwrap_err();
    assert!(matches!(problem, RootProblem::FilesystemRoot(ref p) if p == Path::new("/")));
    assert!(problem.to_string().contains("filesystem root"), "{problem}");
}

#[test]
fn home_and_its_ancestors_are_refused() {
    let fx = Fx::new();
    let mut dir = fx.home.as_path();
    while let Some(parent) = dir.parent() {
        let problem = check_dangerous(dir, &fx.home).unwrap_err();
        assert!(
            matches!(problem, RootProblem::HomeOrAncestor(ref p) if p == dir),
            "{}: {problem:?}",
            dir.display()
        );
        dir = parent;
    }
    let problem = fx.prepare(&fx.home, false).unwrap_err();
    assert!(
        matches!(problem, RootProblem::HomeOrAncestor(_)),
        "{problem:?}"
    );
}

#[test]
fn home_is_compared_canonically_and_as_given() {
    let fx = Fx::new();
    // Home spelled through a link: its real location is still refused.
    let link = fx.base.join("home-link");
    symlink(&fx.home, &link).unwrap();
    assert!(matches!(
        check_dangerous(&fx.home, &link),
        Err(RootProblem::HomeOrAncestor(_))
    ));
    // Home that cannot be resolved: its spelling is used as given.
    let problem = check_dangerous(Path::new("/nonexistent-home"), Path::new(NO_HOME));
    assert!(matches!(problem, Err(RootProblem::HomeOrAncestor(_))));
    // A name that merely starts like home's parent is not an ancestor.
    assert!(check_dangerous(Path::new("/nonexistent-ho"), Path::new(NO_HOME)).is_ok());
}

#[test]
fn subdirectory_of_home_is_allowed() {
    let fx = Fx::new();
    for sub in ["autogpt-workspace", "projects/x"] {
        let dir = fx.home.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        let prepared = fx.prepare(&dir, false).unwrap();
        assert_eq!(
            prepared,
            PreparedRoot {
                path: dir,
                created: false
            }
        );
    }
    // A sibling of home is neither home nor its ancestor.
    let bob = fx.base.join("home/bob");
    std::fs::create_dir(&bob).unwrap();
    assert!(fx.prepare(&bob, false).is_ok());
}

#[test]
fn listed_system_directories_are_refused() {
    for dir in [
        "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin",
        "/srv", "/sys", "/usr", "/var",
    ] {
        let problem = check(dir).unwrap_err();
        assert!(
            matches!(problem, RootProblem::SystemDirectory(ref p) if p == Path::new(dir)),
            "{dir}: {problem:?}"
        );
        assert!(problem.to_string().contains("system directory"));
    }
}

#[test]
fn anything_inside_proc_sys_and_dev_is_refused() {
    for dir in [
        "/proc/1",
        "/proc/self/fd",
        "/sys/kernel",
        "/dev/shm",
        "/dev/mqueue/x",
    ] {
        assert!(
            matches!(check(dir), Err(RootProblem::SystemDirectory(_))),
            "{dir}"
        );
    }
    // Only whole components count: these merely share a prefix.
    for dir in ["/procfs", "/system", "/devel"] {
        assert!(check(dir).is_ok(), "{dir}");
    }
}

#[test]
fn var_itself_is_refused_but_not_below_it() {
    assert!(matches!(
        check("/var"),
        Err(RootProblem::SystemDirectory(_))
    ));
    for dir in ["/var/tmp/x", "/usr/local/src/project", "/srv/www", "/etc/x"] {
        assert!(check(dir).is_ok(), "{dir}");
    }
}

#[test]
fn missing_default_root_is_created_with_mode_0700() {
    let fx = Fx::new();
    let root = fx.home.join("a/b/autogpt-workspace");
    let prepared = fx.prepare(&root, true).unwrap();
    assert_eq!(
        prepared,
        PreparedRoot {
            path: root.clone(),
            created: true
        }
    );
    for dir in ["a", "a/b", "a/b/autogpt-workspace"] {
        assert_eq!(mode(&fx.home.join(dir)), 0o700, "{dir}");
    }
    // A second start finds it and reports nothing created.
    assert!(!fx.prepare(&root, true).unwrap().created);
}

#[test]
fn existing_default_root_keeps_its_mode() {
    let fx = Fx::new();
    let root = fx.home.join("autogpt-workspace");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o750)).unwrap();
    assert!(!fx.prepare(&root, true).unwrap().created);
    assert_eq!(mode(&root), 0o750);
}

#[test]
fn missing_non_default_root_is_refused() {
    let fx = Fx::new();
    let root = fx.home.join("elsewhere/ws");
    let problem = fx.prepare(&root, false).unwrap_err();
    assert!(matches!(problem, RootProblem::Missing(ref p) if *p == root));
    assert_eq!(
        problem.to_string(),
        format!("allowed_root {} does not exist", root.display())
    );
    assert!(!fx.home.join("elsewhere").exists(), "nothing was created");
}

#[test]
fn dangling_link_as_default_root_is_not_written_through() {
    let fx = Fx::new();
    let root = fx.home.join("autogpt-workspace");
    let target = fx.base.join("target");
    symlink(&target, &root).unwrap();
    assert!(matches!(fx.prepare(&root, true), Err(RootProblem::Io(..))));
    assert!(!target.exists());
}

#[test]
fn symlink_to_dangerous_dir_is_refused_after_canonicalisation() {
    let fx = Fx::new();
    let to_etc = fx.home.join("etc-link");
    symlink("/etc", &to_etc).unwrap();
    let problem = fx.prepare(&to_etc, false).unwrap_err();
    assert!(
        matches!(problem, RootProblem::SystemDirectory(ref p) if p == Path::new("/etc")),
        "{problem:?}"
    );
    assert_eq!(
        problem.to_string(),
        "allowed_root /etc is a system directory; \
         choose a dedicated workspace such as ~/autogpt-workspace"
    );
    let to_home = fx.base.join("home-link");
    symlink(&fx.home, &to_home).unwrap();
    assert!(matches!(
        fx.prepare(&to_home, true),
        Err(RootProblem::HomeOrAncestor(ref p)) if *p == fx.home
    ));
}

#[test]
fn prepared_path_is_canonical() {
    let fx = Fx::new();
    let ws = fx.home.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let link = fx.base.join("ws-link");
    symlink(&ws, &link).unwrap();
    assert_eq!(fx.prepare(&link, false).unwrap().path, ws);
    let dotted = fx.home.join("ws/../ws/.");
    assert_eq!(fx.prepare(&dotted, false).unwrap().path, ws);
}

#[test]
fn file_is_not_a_directory() {
    let fx = Fx::new();
    let file = fx.home.join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    for is_default in [false, true] {
        let problem = fx.prepare(&file, is_default).unwrap_err();
        assert!(matches!(problem, RootProblem::NotADirectory(ref p) if *p == file));
    }
}

#[test]
fn non_utf8_root_is_refused() {
    let fx = Fx::new();
    let root = fx.home.join(OsStr::from_bytes(b"ws-\xff"));
    std::fs::create_dir(&root).unwrap();
    let problem = fx.prepare(&root, false).unwrap_err();
    assert!(matches!(problem, RootProblem::NotUnicode(ref p) if *p == root));
}

/// Set for the re-run of [`unwritable_root_is_refused`] as an unprivileged
/// user: the directory to check.
const CHILD_ROOT: &str = "JAIL_ROOTS_CHILD_ROOT";

#[test]
fn unwritable_root_is_refused() {
    if let Some(root) = std::env::var_os(CHILD_ROOT) {
        assert_read_only(Path::new(&root));
        return;
    }
    let fx = Fx::new();
    let root = fx.home.join("read-only");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555)).unwrap();
    if !is_root() {
        assert_read_only(&root);
        return;
    }
    // Root bypasses permission bits: ask the same question as `nobody`,
    // who can reach the tree but owns nothing in it.
    for dir in [fx._tmp.path(), &fx.base, &fx.base.join("home"), &fx.home] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "unwritable_root_is_refused", "--test-threads=1"])
        .env(CHILD_ROOT, &root)
        .uid(65534)
        .gid(65534)
        .output();
    match out {
        Ok(out) => assert!(
            out.status.success(),
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => println!("skipped: cannot run the test binary as nobody: {e}"),
    }
}

fn assert_read_only(root: &Path) {
    assert!(!is_root(), "the check must not run as root");
    let home = Path::new(NO_HOME);
    let problem = prepare_legacy_root(root, false, home, false).unwrap_err();
    assert!(
        matches!(problem, RootProblem::NoAccess(ref p, missing)
            if p == root && missing == Access::WRITE_OK),
        "{problem:?}"
    );
    assert!(
        problem.to_string().contains("lacks write permission"),
        "{problem}"
    );
}

#[test]
fn wsl_drive_roots_are_refused_only_on_wsl() {
    use autogpt_shim::jail::check_dangerous_for;
    let home = std::path::Path::new("/home/alice");
    for drive in ["/mnt/c", "/mnt/D"] {
        assert!(check_dangerous_for(std::path::Path::new(drive), home, true).is_err());
        assert!(check_dangerous_for(std::path::Path::new(drive), home, false).is_ok());
    }
    for allowed in ["/mnt/c/Users/alice/project", "/mnt/cd", "/mnt"] {
        assert!(
            check_dangerous_for(std::path::Path::new(allowed), home, true).is_ok(),
            "{allowed}"
        );
    }
}

#[test]
fn credential_folders_and_what_holds_them_are_refused_with_everything_inside() {
    let fx = Fx::new();
    for rel in [
        ".ssh",
        ".gnupg",
        ".aws",
        ".kube",
        ".docker",
        ".local/share/keyrings",
    ] {
        let folder = fx.home.join(rel);
        std::fs::create_dir_all(folder.join("sub")).unwrap();
        for root in [folder.clone(), folder.join("sub")] {
            let problem = check_dangerous(&root, &fx.home).unwrap_err();
            assert!(
                matches!(problem, RootProblem::SensitiveFolder(ref p, _) if *p == root),
                "{}: {problem:?}",
                root.display()
            );
            assert!(problem.to_string().contains(rel), "{problem}");
        }
    }
    // ~/.local/share holds the keyrings.
    assert!(check_dangerous(&fx.home.join(".local/share"), &fx.home).is_err());
}

#[test]
fn configuration_folders_are_refused_but_their_subfolders_are_not() {
    let fx = Fx::new();
    for rel in [".config", ".local"] {
        let folder = fx.home.join(rel);
        std::fs::create_dir_all(folder.join("editor")).unwrap();
        let problem = check_dangerous(&folder, &fx.home).unwrap_err();
        assert!(
            matches!(problem, RootProblem::SensitiveFolder(..)),
            "{problem:?}"
        );
        check_dangerous(&folder.join("editor"), &fx.home).unwrap();
    }
}

#[test]
fn a_link_to_a_credential_folder_is_refused_by_its_target() {
    let fx = Fx::new();
    let real = fx.base.join("elsewhere/keys");
    std::fs::create_dir_all(&real).unwrap();
    symlink(&real, fx.home.join(".ssh")).unwrap();
    assert!(check_dangerous(&real, &fx.home).is_err());
    assert!(check_dangerous(&fx.base.join("elsewhere"), &fx.home).is_err());
}

#[test]
fn inspecting_a_missing_default_root_creates_nothing() {
    let fx = Fx::new();
    let root = fx.home.join("autogpt-workspace");
    assert_eq!(
        inspect_legacy_root(&root, true, &fx.home, false).unwrap(),
        Inspected::WouldCreate
    );
    assert!(!root.exists());
    assert!(matches!(
        inspect_legacy_root(&root, false, &fx.home, false),
        Err(RootProblem::Missing(_))
    ));
    std::fs::create_dir(&root).unwrap();
    assert_eq!(
        inspect_legacy_root(&root, true, &fx.home, false).unwrap(),
        Inspected::Usable(root.clone())
    );
    // The same refusals as at start.
    assert!(matches!(
        inspect_legacy_root(&fx.home, false, &fx.home, false),
        Err(RootProblem::HomeOrAncestor(_))
    ));
}
