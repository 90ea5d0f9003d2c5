//! The encrypted-file store `tokens.enc` on disk (AUTH.md §10.1, §10.4):
//! permission checks, the exclusive lock on `tokens.enc.lock`, reading and
//! decrypting, and the atomic rewrite (temporary file created `O_EXCL` with
//! mode 0600, fsync, rename, fsync of the directory).
//!
//! Owns every file-system call of the file store. It must never overwrite
//! or delete a `tokens.enc` that fails to decrypt or parse, never follow a
//! symbolic link at the file's name, never read a file or directory that
//! group or others can access, and never leave plaintext or a derived key in
//! a buffer that is not zeroed. The byte format is `container`'s.

use std::path::{Path, PathBuf};

use super::secret::Passphrase;
#[cfg(not(unix))]
use super::{container::Contents, error::SecretError};

/// The file's name.
pub const FILE_NAME: &str = "tokens.enc";
/// The lock file's name (AUTH.md §10.4).
pub const LOCK_NAME: &str = "tokens.enc.lock";

/// The file store in one directory, with the passphrase it encrypts under.
///
/// The passphrase is kept (zeroized on drop) because every write draws a
/// fresh salt and so derives a fresh key; each derived key is zeroed as soon
/// as its encryption or decryption is done.
#[derive(Debug)]
pub struct TokenFile {
    dir: PathBuf,
    passphrase: Passphrase,
}

impl TokenFile {
    /// The store in `dir` (AUTH.md §10.1; `OsPaths::secret_store_dir`).
    pub fn new(dir: PathBuf, passphrase: Passphrase) -> TokenFile {
        TokenFile { dir, passphrase }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `tokens.enc`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// `tokens.enc.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_NAME)
    }

    /// The passphrase (for the legacy key import, which uses the same one).
    pub(crate) fn passphrase(&self) -> &Passphrase {
        &self.passphrase
    }

    /// Whether a `tokens.enc` exists in `dir` (any kind of entry; nothing is
    /// read). `doctor` warns about one next to a usable keychain.
    pub fn present(dir: &Path) -> bool {
        dir.join(FILE_NAME).symlink_metadata().is_ok()
    }
}

#[cfg(unix)]
mod imp {
    use std::fs::File;
    use std::io::{self, Read, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::DirBuilderExt;
    use std::path::Path;

    use rustix::fs::{self as rfs, AtFlags, FileType, FlockOperation, Mode, OFlags};
    use rustix::io::Errno;

    use super::{FILE_NAME, LOCK_NAME, TokenFile};
    use crate::audit::record::hex;
    use crate::secrets::container::{self, Contents, Header, MAX_FILE_LEN, OpenError};
    use crate::secrets::error::{IoStep, Node, SecretError};

    /// Group and other permission bits.
    const GROUP_OTHER: u32 = 0o077;

    /// Permission bits of a `stat` mode as `u32` (`mode_t` is 16 bits on
    /// macOS, 32 on Linux).
    fn permissions(st_mode: impl Into<u32>) -> u32 {
        st_mode.into() & 0o7777
    }

    impl TokenFile {
        /// Reads and decrypts the store. A missing directory or file is an
        /// empty store. Takes no lock: a rewrite replaces the file by an
        /// atomic rename, so a reader sees either the old or the new file.
        pub fn read(&self) -> Result<Contents, SecretError> {
            let Some(dir) = self.open_dir()? else {
                return Ok(Contents::default());
            };
            self.load(&dir)
        }

        /// Read-modify-write under the exclusive lock (AUTH.md §10.4).
        ///
        /// `change` sees the current contents (empty when there is no file)
        /// and returns its result and whether it changed them; only then is
        /// the file rewritten. A file that cannot be decrypted or parsed
        /// fails before `change` runs, so it is never overwritten.
        pub fn update<T>(
            &self,
            change: impl FnOnce(&mut Contents) -> Result<(T, bool), SecretError>,
        ) -> Result<T, SecretError> {
            let dir = self.create_dir()?;
            let _lock = self.lock(&dir)?;
            let mut contents = self.load(&dir)?;
            let (result, changed) = change(&mut contents)?;
            if changed {
                self.store(&dir, &contents)?;
            }
            Ok(result)
            // `_lock` is closed here, which releases the lock.
        }

        /// Opens the directory (following symbolic links: it is the user's
        /// choice of location) and checks that only its owner can use it.
        fn open_dir(&self) -> Result<Option<OwnedFd>, SecretError> {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let dir = match rfs::open(&self.dir, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::NOTDIR) => {
                    return Err(SecretError::NotRegular {
                        node: Node::Directory,
                        path: self.dir.clone(),
                    });
                }
                Err(errno) => return Err(self.io(IoStep::OpenDirectory, &self.dir, errno)),
            };
            let stat =
                rfs::fstat(&dir).map_err(|e| self.io(IoStep::OpenDirectory, &self.dir, e))?;
            let mode = permissions(stat.st_mode);
            if mode & GROUP_OTHER != 0 {
                return Err(SecretError::InsecurePermissions {
                    node: Node::Directory,
                    path: self.dir.clone(),
                    mode,
                });
            }
            Ok(Some(dir))
        }

        /// Creates the directory (and missing parents) with mode 0700, then
        /// opens and checks it.
        fn create_dir(&self) -> Result<OwnedFd, SecretError> {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(|source| SecretError::Io {
                    step: IoStep::CreateDirectory,
                    path: self.dir.clone(),
                    source,
                })?;
            match self.open_dir()? {
                Some(dir) => Ok(dir),
                // Removed between creating and opening it.
                None => Err(self.io(IoStep::OpenDirectory, &self.dir, Errno::NOENT)),
            }
        }

        /// Takes the exclusive advisory lock, waiting for another holder
        /// (a daemon refreshing tokens, a `revoke`).
        fn lock(&self, dir: &OwnedFd) -> Result<OwnedFd, SecretError> {
            let lock_error = |errno: Errno| SecretError::Lock {
                path: self.lock_path(),
                source: errno.into(),
            };
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            let fd = rfs::openat(dir, LOCK_NAME, flags, Mode::from_bits_truncate(0o600))
                .map_err(lock_error)?;
            loop {
                match rfs::flock(&fd, FlockOperation::LockExclusive) {
                    Ok(()) => return Ok(fd),
                    Err(Errno::INTR) => continue,
                    Err(errno) => return Err(lock_error(errno)),
                }
            }
        }

        /// Reads, decrypts and parses `tokens.enc`; empty when it is absent.
        fn load(&self, dir: &OwnedFd) -> Result<Contents, SecretError> {
            let Some(bytes) = self.read_file(dir)? else {
                return Ok(Contents::default());
            };
            let plaintext =
                container::open(&bytes, self.passphrase()).map_err(|err| match err {
                    OpenError::Format(problem) => SecretError::CorruptFile {
                        path: self.path(),
                        problem,
                    },
                    OpenError::Authentication => SecretError::Undecryptable {
                        path: self.path(),
                        passphrase: self.passphrase.origin().clone(),
                    },
                })?;
            Contents::from_json(&plaintext).map_err(|problem| SecretError::BadPlaintext {
                path: self.path(),
                problem,
            })
        }

        /// The raw file, after the checks of AUTH.md §10.1.
        fn read_file(&self, dir: &OwnedFd) -> Result<Option<Vec<u8>>, SecretError> {
            let path = self.path();
            // NOFOLLOW: a symbolic link planted at the name is refused, not
            // followed. NONBLOCK: a FIFO planted there cannot hang the open;
            // it is refused below as not a regular file.
            let flags = OFlags::RDONLY
                | OFlags::CLOEXEC
                | OFlags::NOFOLLOW
                | OFlags::NOCTTY
                | OFlags::NONBLOCK;
            let fd = match rfs::openat(dir, FILE_NAME, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => {
                    return Err(SecretError::NotRegular {
                        node: Node::File,
                        path,
                    });
                }
                Err(errno) => return Err(self.io(IoStep::Open, &path, errno)),
            };
            let stat = rfs::fstat(&fd).map_err(|e| self.io(IoStep::Open, &path, e))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(SecretError::NotRegular {
                    node: Node::File,
                    path,
                });
            }
            let mode = permissions(stat.st_mode);
            if mode & GROUP_OTHER != 0 {
                return Err(SecretError::InsecurePermissions {
                    node: Node::File,
                    path,
                    mode,
                });
            }
            let mut bytes = Vec::new();
            // One byte past the limit, so that an oversized file is seen as
            // such by the format check instead of being cut silently.
            let limit = u64::try_from(MAX_FILE_LEN + 1).unwrap_or(u64::MAX);
            File::from(fd)
                .take(limit)
                .read_to_end(&mut bytes)
                .map_err(|source| SecretError::Io {
                    step: IoStep::Read,
                    path,
                    source,
                })?;
            Ok(Some(bytes))
        }

        /// Encrypts `contents` under a fresh salt and nonce and replaces the
        /// file atomically.
        fn store(&self, dir: &OwnedFd, contents: &Contents) -> Result<(), SecretError> {
            let mut salt = [0u8; container::SALT_LEN];
            let mut nonce = [0u8; container::NONCE_LEN];
            getrandom::fill(&mut salt).map_err(|_| SecretError::Randomness)?;
            getrandom::fill(&mut nonce).map_err(|_| SecretError::Randomness)?;
            let header = Header::for_writing(salt, nonce);
            let key = header
                .derive_key(self.passphrase())
                .map_err(|_| SecretError::Internal("Argon2id refused the writer's parameters"))?;
            let plaintext = contents.to_json();
            let sealed = container::seal(&header, &key, &plaintext);
            drop(key);
            drop(plaintext);
            if sealed.is_empty() {
                return Err(SecretError::Internal("AES-GCM refused to encrypt"));
            }
            self.replace(dir, &sealed)
        }

        /// Temporary file (O_EXCL, 0600) → write → fsync → rename over
        /// `tokens.enc` → fsync the directory.
        fn replace(&self, dir: &OwnedFd, bytes: &[u8]) -> Result<(), SecretError> {
            let mut suffix = [0u8; 8];
            getrandom::fill(&mut suffix).map_err(|_| SecretError::Randomness)?;
            let temp_name = format!(".{FILE_NAME}.tmp-{}", hex(&suffix));
            let temp_path = self.dir.join(&temp_name);
            let flags = OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::CLOEXEC
                | OFlags::NOFOLLOW
                | OFlags::NOCTTY;
            let fd = rfs::openat(dir, &temp_name, flags, Mode::from_bits_truncate(0o600))
                .map_err(|e| self.io(IoStep::WriteTemporary, &temp_path, e))?;
            let mut file = File::from(fd);
            let written = file.write_all(bytes).and_then(|()| file.sync_all());
            drop(file);
            if let Err(source) = written {
                let _ = rfs::unlinkat(dir, &temp_name, AtFlags::empty());
                return Err(SecretError::Io {
                    step: IoStep::WriteTemporary,
                    path: temp_path,
                    source,
                });
            }
            if let Err(errno) = rfs::renameat(dir, &temp_name, dir, FILE_NAME) {
                let _ = rfs::unlinkat(dir, &temp_name, AtFlags::empty());
                return Err(self.io(IoStep::Rename, &self.path(), errno));
            }
            rfs::fsync(dir).map_err(|e| self.io(IoStep::SyncDirectory, &self.path(), e))
        }

        fn io(&self, step: IoStep, path: &Path, errno: Errno) -> SecretError {
            io_error(step, path, errno)
        }
    }

    fn io_error(step: IoStep, path: &Path, errno: Errno) -> SecretError {
        SecretError::Io {
            step,
            path: path.to_path_buf(),
            source: io::Error::from(errno),
        }
    }

    /// Reads a small file that another program wrote (the reference's
    /// `audit-key.enc`): `None` when it does not exist; refused when it is
    /// not a regular file; at most `limit + 1` bytes are read, so the caller
    /// sees an oversized file as such.
    pub(crate) fn read_foreign(path: &Path, limit: usize) -> Result<Option<Vec<u8>>, SecretError> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = match rfs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(io_error(IoStep::Open, path, errno)),
        };
        let stat = rfs::fstat(&fd).map_err(|e| io_error(IoStep::Open, path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SecretError::NotRegular {
                node: Node::File,
                path: path.to_path_buf(),
            });
        }
        let mut bytes = Vec::new();
        let limit = u64::try_from(limit.saturating_add(1)).unwrap_or(u64::MAX);
        File::from(fd)
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|source| SecretError::Io {
                step: IoStep::Read,
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Some(bytes))
    }

    /// Takes an exclusive lock on `dir/name`, creating the directory (0700)
    /// and the lock file (0600) when missing. Unlike the file store, the
    /// directory's permissions are not checked: with the keychain in use it
    /// is the audit log's directory, whose permissions the audit writer
    /// tightens itself (AUTH.md §10.1).
    pub(crate) fn creation_lock(dir: &Path, name: &str) -> Result<OwnedFd, SecretError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| SecretError::Io {
                step: IoStep::CreateDirectory,
                path: dir.to_path_buf(),
                source,
            })?;
        let path = dir.join(name);
        let lock_error = |errno: Errno| SecretError::Lock {
            path: path.clone(),
            source: errno.into(),
        };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let fd = rfs::open(&path, flags, Mode::from_bits_truncate(0o600)).map_err(lock_error)?;
        loop {
            match rfs::flock(&fd, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(fd),
                Err(Errno::INTR) => continue,
                Err(errno) => return Err(lock_error(errno)),
            }
        }
    }
}

#[cfg(unix)]
pub(crate) use imp::{creation_lock, read_foreign};

/// Not available on this platform.
#[cfg(not(unix))]
pub(crate) fn creation_lock(_dir: &Path, _name: &str) -> Result<(), SecretError> {
    Err(SecretError::FileStoreUnsupported)
}

/// Reads a small file another program wrote (see the Unix version).
#[cfg(not(unix))]
pub(crate) fn read_foreign(path: &Path, limit: usize) -> Result<Option<Vec<u8>>, SecretError> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SecretError::Io {
                step: super::error::IoStep::Open,
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut bytes = Vec::new();
    let limit = u64::try_from(limit.saturating_add(1)).unwrap_or(u64::MAX);
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|source| SecretError::Io {
            step: super::error::IoStep::Read,
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Some(bytes))
}

#[cfg(not(unix))]
impl TokenFile {
    /// Not available: the Windows store needs an owner-only DACL, which is
    /// not implemented yet.
    pub fn read(&self) -> Result<Contents, SecretError> {
        Err(SecretError::FileStoreUnsupported)
    }

    /// Not available (see [`read`](Self::read)).
    pub fn update<T>(
        &self,
        _change: impl FnOnce(&mut Contents) -> Result<(T, bool), SecretError>,
    ) -> Result<T, SecretError> {
        Err(SecretError::FileStoreUnsupported)
    }
}
