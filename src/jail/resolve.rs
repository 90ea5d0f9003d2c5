//! Layer 2 of the jail: the Python-compatible non-strict `realpath`
//! (JAIL.md §3.5, §6.3).
//!
//! This layer only decides. It looks at the filesystem by path (`lstat`,
//! `readlink`), which is racy by nature, and therefore it must never be used
//! to open, create or change anything: enforcement re-walks the resulting
//! remainder beneath the pinned root fd (see `enforce`), where a swapped
//! component fails closed.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Most symlink expansions in one resolution; the 41st counts as a loop.
pub const MAX_SYMLINK_EXPANSIONS: usize = 40;

/// Most path components one resolution may walk (input components plus the
/// components of every link target). Legitimate paths need a few hundred at
/// most; without a bound, 40 links each pointing at a 2,000-component target
/// would cost minutes of CPU.
pub const MAX_RESOLVE_STEPS: usize = 4096;

/// Longest path `lstat` can be asked about (`PATH_MAX` without the NUL): a
/// longer candidate cannot be a symlink the kernel would report, exactly as
/// an `ENAMETOOLONG` from `lstat` means "not a symlink".
const MAX_LSTAT_BYTES: usize = 4095;

/// A resolved absolute path, as components below `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Components of the physical path (no `.`, no `..`, none empty).
    pub components: Vec<OsString>,
    /// The resolution stopped at a symlink loop (or more than 40
    /// expansions) and the looping link is still part of the result.
    pub looped: bool,
}

impl Resolved {
    /// The path as bytes, `/`-joined.
    pub fn to_path_bytes(&self) -> Vec<u8> {
        join_components(&self.components)
    }
}

/// The path needs more than [`MAX_RESOLVE_STEPS`] steps to resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooComplex;

/// `/`-joins components into an absolute path (`/` for none).
pub fn join_components(components: &[OsString]) -> Vec<u8> {
    if components.is_empty() {
        return b"/".to_vec();
    }
    let mut out = Vec::new();
    for c in components {
        out.push(b'/');
        out.extend_from_slice(c.as_bytes());
    }
    out
}

enum Step {
    /// One component of a path still to be walked.
    Name(Vec<u8>),
    /// Every component of `link`'s target has been walked: remember where
    /// the link led.
    Resolved { link: Vec<u8> },
}

/// How the decision layer observes the filesystem; a trait so tests can
/// exercise the algorithm against an in-memory tree as well as the real one.
pub trait LinkReader {
    /// `readlink` of an absolute path when it is a symlink; `None` when it is
    /// not a symlink or `lstat` fails for any reason.
    fn read_link(&self, path: &[u8]) -> Option<Vec<u8>>;
}

/// The real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filesystem;

impl LinkReader for Filesystem {
    fn read_link(&self, path: &[u8]) -> Option<Vec<u8>> {
        let path = Path::new(OsStr::from_bytes(path));
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.file_type().is_symlink() {
            return None;
        }
        std::fs::read_link(path)
            .ok()
            .map(|t| t.into_os_string().into_vec())
    }
}

fn split(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

/// The physical path walked so far: one byte buffer (`/a/b/c`, empty for
/// `/`) plus the offset where each component starts, so pushing, popping
/// and naming a candidate cost only the component's length.
struct Work {
    path: Vec<u8>,
    starts: Vec<usize>,
}

impl Work {
    fn new(base: Vec<OsString>) -> Self {
        let mut work = Self {
            path: Vec::new(),
            starts: Vec::new(),
        };
        for c in base {
            work.push(c.as_bytes());
        }
        work
    }

    fn push(&mut self, name: &[u8]) {
        self.starts.push(self.path.len());
        self.path.push(b'/');
        self.path.extend_from_slice(name);
    }

    fn pop(&mut self) {
        if let Some(start) = self.starts.pop() {
            self.path.truncate(start);
        }
    }

    fn clear(&mut self) {
        self.path.clear();
        self.starts.clear();
    }

    fn set(&mut self, path: &[u8]) {
        self.clear();
        for c in split(path) {
            self.push(c);
        }
    }

    /// The path for a syscall or a map key (`/` for the root).
    fn bytes(&self) -> &[u8] {
        if self.path.is_empty() {
            b"/"
        } else {
            &self.path
        }
    }

    fn into_components(self) -> Vec<OsString> {
        let mut out = Vec::with_capacity(self.starts.len());
        for (i, &start) in self.starts.iter().enumerate() {
            let end = self.starts.get(i + 1).copied().unwrap_or(self.path.len());
            out.push(OsString::from_vec(self.path[start + 1..end].to_vec()));
        }
        out
    }
}

/// Resolves an absolute path with the semantics of JAIL.md §3.5: missing
/// components are kept, dangling links are followed, `..` applies to the
/// physical path walked so far, loops stop resolution.
pub fn resolve(path: &[u8], fs: &dyn LinkReader) -> Result<Resolved, TooComplex> {
    resolve_from(Vec::new(), path, fs)
}

/// [`resolve`] of `rest` relative to `base`, a path already known to be
/// physical (symlink-free), such as the canonical root.
pub fn resolve_from(
    base: Vec<OsString>,
    rest: &[u8],
    fs: &dyn LinkReader,
) -> Result<Resolved, TooComplex> {
    let mut work = Work::new(base);
    let mut pending: Vec<Step> = split(rest).rev().map(|c| Step::Name(c.to_vec())).collect();
    // link path -> where it led (None while its target is being walked).
    let mut seen: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
    let mut expansions = 0usize;
    let mut steps = 0usize;

    while let Some(step) = pending.pop() {
        let name = match step {
            Step::Resolved { link } => {
                seen.insert(link, Some(work.bytes().to_vec()));
                continue;
            }
            Step::Name(name) => name,
        };
        steps += 1;
        if steps > MAX_RESOLVE_STEPS {
            return Err(TooComplex);
        }
        if name == b".." {
            work.pop();
            continue;
        }
        work.push(&name);
        if work.path.len() > MAX_LSTAT_BYTES {
            // Neither lstat nor any remembered link can match a path this
            // long: it is an ordinary (missing) component.
            continue;
        }
        match seen.get(work.bytes()) {
            Some(Some(target)) => {
                let target = target.clone();
                work.set(&target);
                continue;
            }
            Some(None) => return Ok(looped(work, pending)),
            None => {}
        }
        let Some(target) = fs.read_link(work.bytes()) else {
            continue;
        };
        expansions += 1;
        if expansions > MAX_SYMLINK_EXPANSIONS {
            return Ok(looped(work, pending));
        }
        let link = work.bytes().to_vec();
        seen.insert(link.clone(), None);
        // The link's directory is where a relative target starts.
        work.pop();
        if target.first() == Some(&b'/') {
            work.clear();
        }
        pending.push(Step::Resolved { link });
        pending.extend(split(&target).rev().map(|c| Step::Name(c.to_vec())));
    }
    Ok(Resolved {
        components: work.into_components(),
        looped: false,
    })
}

/// The result of a loop: the looping link (last component of `work`)
/// followed by every component not yet walked, with `..` then applied
/// lexically (the reference normalises its final result). When a later `..`
/// removes the looping link itself, the result no longer contains the loop.
fn looped(work: Work, pending: Vec<Step>) -> Resolved {
    let mut components = work.into_components();
    let link_depth = components.len();
    let mut loop_kept = true;
    for step in pending.into_iter().rev() {
        if let Step::Name(name) = step {
            if name == b".." {
                components.pop();
                if components.len() < link_depth {
                    loop_kept = false;
                }
            } else {
                components.push(OsString::from_vec(name));
            }
        }
    }
    Resolved {
        components,
        looped: loop_kept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// An in-memory set of symlinks; every other path is "not a link".
    struct Links(BTreeMap<&'static str, &'static str>);

    impl LinkReader for Links {
        fn read_link(&self, path: &[u8]) -> Option<Vec<u8>> {
            let path = std::str::from_utf8(path).ok()?;
            self.0.get(path).map(|t| t.as_bytes().to_vec())
        }
    }

    fn links(pairs: &[(&'static str, &'static str)]) -> Links {
        Links(pairs.iter().copied().collect())
    }

    fn res(path: &str, fs: &Links) -> (String, bool) {
        let r = resolve(path.as_bytes(), fs).unwrap();
        (String::from_utf8(r.to_path_bytes()).unwrap(), r.looped)
    }

    #[test]
    fn dotdot_after_missing_component_pops_it() {
        let fs = links(&[]);
        assert_eq!(
            res("/ws/missing/../../etc/x", &fs),
            ("/etc/x".into(), false)
        );
        assert_eq!(res("/../..", &fs), ("/".into(), false));
    }

    #[test]
    fn dotdot_applies_after_the_link_is_resolved() {
        let fs = links(&[("/w/l", "/o/deep/dir")]);
        assert_eq!(res("/w/l/../x", &fs), ("/o/deep/x".into(), false));
    }

    #[test]
    fn relative_and_absolute_targets_and_dangling_links() {
        let fs = links(&[("/w/l", "sub"), ("/w/abs", "/w/f.txt"), ("/w/d", "/o/new")]);
        assert_eq!(res("/w/l/x", &fs), ("/w/sub/x".into(), false));
        assert_eq!(res("/w/abs", &fs), ("/w/f.txt".into(), false));
        assert_eq!(res("/w/d", &fs), ("/o/new".into(), false));
    }

    #[test]
    fn chains_of_links_resolve_fully() {
        let fs = links(&[("/w/a", "b"), ("/w/b", "c/../d"), ("/w/d", "/w/e")]);
        assert_eq!(res("/w/a/f", &fs), ("/w/e/f".into(), false));
    }

    #[test]
    fn loops_keep_the_looping_link_and_the_rest() {
        let fs = links(&[("/w/a", "b"), ("/w/b", "a")]);
        let (path, looped) = res("/w/a/x", &fs);
        assert!(looped);
        assert!(path == "/w/a/x" || path == "/w/b/x", "{path}");
        let fs = links(&[("/w/self", "self")]);
        assert_eq!(res("/w/self/y/../z", &fs), ("/w/self/z".into(), true));
    }

    #[test]
    fn a_resolved_link_is_reused_without_counting_again() {
        let fs = links(&[("/w/l", "sub")]);
        // Many uses of the same link in one path: memoised, not a loop.
        let path = format!("/w{}", "/l/..".repeat(100));
        assert_eq!(res(&path, &fs), ("/w".into(), false));
    }

    #[test]
    fn more_than_forty_expansions_count_as_a_loop() {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for i in 0..41 {
            pairs.push((format!("/w/l{i}"), format!("l{}", i + 1)));
        }
        let leaked: Vec<(&'static str, &'static str)> = pairs
            .into_iter()
            .map(|(a, b)| {
                (
                    &*Box::leak(a.into_boxed_str()),
                    &*Box::leak(b.into_boxed_str()),
                )
            })
            .collect();
        let fs = links(&leaked);
        assert!(res("/w/l0", &fs).1);
        assert!(!res("/w/l1", &fs).1); // exactly 40 expansions
    }

    #[test]
    fn magic_links_resolve_by_their_text() {
        let fs = links(&[("/proc/self/root", "/")]);
        assert_eq!(
            res("/proc/self/root/etc/passwd", &fs),
            ("/etc/passwd".into(), false)
        );
    }
}

#[cfg(test)]
mod limits {
    use super::*;

    struct Chain;

    /// `/w/s{i}` → `x/../x/../…/s{i+1}` (1,000 `x/..` pairs): each expansion
    /// walks two thousand components before reaching the next link.
    impl LinkReader for Chain {
        fn read_link(&self, path: &[u8]) -> Option<Vec<u8>> {
            let p = std::str::from_utf8(path).ok()?;
            let i: usize = p.strip_prefix("/w/s")?.parse().ok()?;
            Some(format!("{}s{}", "x/../".repeat(1000), i + 1).into_bytes())
        }
    }

    #[test]
    fn resolution_work_is_bounded() {
        assert_eq!(resolve(b"/w/s0", &Chain), Err(TooComplex));
    }

    #[test]
    fn a_later_dotdot_that_removes_the_looping_link_clears_the_loop() {
        struct Loop;
        impl LinkReader for Loop {
            fn read_link(&self, path: &[u8]) -> Option<Vec<u8>> {
                match path {
                    b"/w/a" => Some(b"b".to_vec()),
                    b"/w/b" => Some(b"a".to_vec()),
                    _ => None,
                }
            }
        }
        let r = resolve(b"/w/a/../f.txt", &Loop).unwrap();
        assert!(!r.looped);
        assert_eq!(r.to_path_bytes(), b"/w/f.txt");
        assert!(resolve(b"/w/a/f.txt", &Loop).unwrap().looped);
    }
}
