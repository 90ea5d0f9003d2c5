//! `audit export` (AUDIT.md §11.4): a ZIP bundle of every log file with a
//! manifest signed by the audit key.
//!
//! * [`Crc32`] — CRC-32 (IEEE 802.3, the ZIP checksum) from a table.
//! * [`ZipWriter`] — a minimal ZIP writer: stored entries (method 0), ZIP64
//!   records where a size, offset or the entry count needs them.
//! * [`manifest_json`] — the manifest's exact bytes, Python's
//!   `json.dumps(manifest, sort_keys=True)`.
//! * [`export`] — the whole bundle, written to a 0600 temporary file in the
//!   target directory, synced and renamed into place without replacing
//!   anything.
//!
//! Each log file is copied up to the length it had when it was opened, so a
//! file a running daemon appends to is exported as one consistent snapshot
//! whose checksum and size match the manifest. This module never overwrites
//! an existing output, never leaves a partial archive under the output's
//! name, and never puts the key anywhere: only the HMAC leaves it.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, RenameFlags};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::canonical::repr_f64;
use super::files::base_name;
use super::record::{AuditKey, hex};
use super::writer::AuditError;
use crate::timefmt::Civil;

/// The keychain account holding the audit key, named in the manifest.
pub const KEY_USERNAME: &str = "audit_key";

// ---- CRC-32 -------------------------------------------------------------------

/// The reflected CRC-32 polynomial of ZIP (and Ethernet, gzip, PNG).
const CRC_POLY: u32 = 0xEDB8_8320;

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                CRC_POLY ^ (c >> 1)
            } else {
                c >> 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

/// An incremental CRC-32.
#[derive(Debug, Clone, Copy)]
pub struct Crc32(u32);

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// A CRC over no bytes yet.
    pub fn new() -> Self {
        Crc32(0xFFFF_FFFF)
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut c = self.0;
        for &b in bytes {
            c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    /// The checksum of everything added.
    pub fn finish(self) -> u32 {
        self.0 ^ 0xFFFF_FFFF
    }

    /// The checksum of `bytes`.
    pub fn of(bytes: &[u8]) -> u32 {
        let mut crc = Crc32::new();
        crc.update(bytes);
        crc.finish()
    }
}

// ---- the ZIP writer -----------------------------------------------------------

/// The largest value a 32-bit ZIP field holds; it also marks "see ZIP64".
const MAX_32: u64 = 0xFFFF_FFFF;
/// The largest entry count of the classic end record; it also marks "see
/// ZIP64".
const MAX_16: u64 = 0xFFFF;
/// "Version needed to extract": 2.0 (stored entries), 4.5 (ZIP64).
const VERSION_PLAIN: u16 = 20;
const VERSION_ZIP64: u16 = 45;
/// "Version made by": host 3 (Unix) in the high byte, so readers honour the
/// permission bits of the external attributes.
const MADE_BY_UNIX: u16 = 3 << 8;
/// General-purpose flag bit 11: the name is UTF-8.
const FLAG_UTF8: u16 = 1 << 11;
/// External attributes: a regular file with mode 0600 (the logs are
/// private; so are the extracted copies).
const EXTERNAL_ATTRS: u32 = 0o100_600 << 16;
/// Offset of the CRC-32 field in a local file header.
const LOCAL_CRC_OFFSET: u64 = 14;

/// What the writer knows about an entry for the central directory.
#[derive(Debug)]
struct CentralEntry {
    name: Vec<u8>,
    flags: u16,
    crc: u32,
    size: u64,
    offset: u64,
    zip64_local: bool,
}

/// The size and SHA-256 of an entry's data, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryDigest {
    /// Bytes written.
    pub size: u64,
    /// Lowercase hex SHA-256 of those bytes.
    pub sha256: String,
}

/// A minimal ZIP writer for stored (uncompressed) entries. Sizes are not
/// known until an entry's data has been copied, so the local header is
/// written with placeholders and patched afterwards, which needs `Seek`.
#[derive(Debug)]
pub struct ZipWriter<W: Write + Seek> {
    out: W,
    position: u64,
    entries: Vec<CentralEntry>,
    dos_time: u16,
    dos_date: u16,
    force_zip64: bool,
}

impl<W: Write + Seek> ZipWriter<W> {
    /// A writer at the start of `out`; every entry gets the modification
    /// time `modified` (local civil time, clamped to the DOS range).
    pub fn new(out: W, modified: &Civil) -> Self {
        let (dos_time, dos_date) = dos_date_time(modified);
        ZipWriter {
            out,
            position: 0,
            entries: Vec::new(),
            dos_time,
            dos_date,
            force_zip64: false,
        }
    }

    /// Writes ZIP64 records for every entry and the end of the archive even
    /// when nothing needs them (so that small archives exercise the ZIP64
    /// path in tests).
    pub fn force_zip64(&mut self, force: bool) {
        self.force_zip64 = force;
    }

    /// Adds an entry named `name` with the data of `data`, of which at most
    /// `limit` bytes are copied.
    pub fn add(&mut self, name: &str, data: &mut dyn Read, limit: u64) -> io::Result<EntryDigest> {
        let name_bytes = name.as_bytes().to_vec();
        let name_len = u16::try_from(name_bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "entry name too long"))?;
        let flags = if name.is_ascii() { 0 } else { FLAG_UTF8 };
        let offset = self.position;
        // The size is bounded by `limit`, so it decides the header format
        // before the data is copied.
        let zip64_local = self.force_zip64 || limit >= MAX_32;
        let version = if zip64_local {
            VERSION_ZIP64
        } else {
            VERSION_PLAIN
        };

        let mut header = Vec::with_capacity(30 + name_bytes.len() + 20);
        put_u32(&mut header, 0x0403_4b50);
        put_u16(&mut header, version);
        put_u16(&mut header, flags);
        put_u16(&mut header, 0); // method: stored
        put_u16(&mut header, self.dos_time);
        put_u16(&mut header, self.dos_date);
        put_u32(&mut header, 0); // CRC-32, patched below
        if zip64_local {
            put_u32(&mut header, MAX_32 as u32);
            put_u32(&mut header, MAX_32 as u32);
        } else {
            put_u32(&mut header, 0); // sizes, patched below
            put_u32(&mut header, 0);
        }
        put_u16(&mut header, name_len);
        put_u16(&mut header, if zip64_local { 20 } else { 0 });
        header.extend_from_slice(&name_bytes);
        if zip64_local {
            put_u16(&mut header, 0x0001);
            put_u16(&mut header, 16);
            put_u64(&mut header, 0); // uncompressed size, patched below
            put_u64(&mut header, 0); // compressed size, patched below
        }
        self.write(&header)?;

        let mut crc = Crc32::new();
        let mut sha = Sha256::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 64 * 1024];
        let mut data = data.take(limit);
        loop {
            let n = match data.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            crc.update(&buf[..n]);
            sha.update(&buf[..n]);
            size += n as u64;
            self.write(&buf[..n])?;
        }
        let crc = crc.finish();

        let end = self.position;
        self.out.seek(SeekFrom::Start(offset + LOCAL_CRC_OFFSET))?;
        let mut patch = Vec::with_capacity(12);
        put_u32(&mut patch, crc);
        if !zip64_local {
            // `size < limit < 4 GiB − 1` here.
            put_u32(&mut patch, size as u32);
            put_u32(&mut patch, size as u32);
        }
        self.out.write_all(&patch)?;
        if zip64_local {
            let extra_data = offset + 30 + u64::from(name_len) + 4;
            self.out.seek(SeekFrom::Start(extra_data))?;
            let mut sizes = Vec::with_capacity(16);
            put_u64(&mut sizes, size);
            put_u64(&mut sizes, size);
            self.out.write_all(&sizes)?;
        }
        self.out.seek(SeekFrom::Start(end))?;

        self.entries.push(CentralEntry {
            name: name_bytes,
            flags,
            crc,
            size,
            offset,
            zip64_local,
        });
        Ok(EntryDigest {
            size,
            sha256: hex(&sha.finalize()),
        })
    }

    /// Writes the central directory and the end records; returns the
    /// output (flushed, not synced).
    pub fn finish(mut self) -> io::Result<W> {
        let cd_offset = self.position;
        let entries = std::mem::take(&mut self.entries);
        for entry in &entries {
            let big_size = self.force_zip64 || entry.size >= MAX_32;
            let big_offset = self.force_zip64 || entry.offset >= MAX_32;
            let mut extra = Vec::new();
            if big_size || big_offset {
                let mut fields = Vec::new();
                if big_size {
                    put_u64(&mut fields, entry.size);
                    put_u64(&mut fields, entry.size);
                }
                if big_offset {
                    put_u64(&mut fields, entry.offset);
                }
                put_u16(&mut extra, 0x0001);
                put_u16(&mut extra, fields.len() as u16);
                extra.extend_from_slice(&fields);
            }
            let zip64 = entry.zip64_local || !extra.is_empty();
            let version = if zip64 { VERSION_ZIP64 } else { VERSION_PLAIN };
            let mut header = Vec::with_capacity(46 + entry.name.len() + extra.len());
            put_u32(&mut header, 0x0201_4b50);
            put_u16(&mut header, MADE_BY_UNIX | version);
            put_u16(&mut header, version);
            put_u16(&mut header, entry.flags);
            put_u16(&mut header, 0); // method: stored
            put_u16(&mut header, self.dos_time);
            put_u16(&mut header, self.dos_date);
            put_u32(&mut header, entry.crc);
            let size32 = if big_size { MAX_32 } else { entry.size } as u32;
            put_u32(&mut header, size32);
            put_u32(&mut header, size32);
            put_u16(&mut header, entry.name.len() as u16);
            put_u16(&mut header, extra.len() as u16);
            put_u16(&mut header, 0); // comment length
            put_u16(&mut header, 0); // disk number start
            put_u16(&mut header, 0); // internal attributes
            put_u32(&mut header, EXTERNAL_ATTRS);
            put_u32(
                &mut header,
                if big_offset { MAX_32 } else { entry.offset } as u32,
            );
            header.extend_from_slice(&entry.name);
            header.extend_from_slice(&extra);
            self.write(&header)?;
        }
        let cd_size = self.position - cd_offset;
        let count = entries.len() as u64;
        let zip64_end =
            self.force_zip64 || count > MAX_16 || cd_offset >= MAX_32 || cd_size >= MAX_32;

        let mut tail = Vec::with_capacity(98);
        if zip64_end {
            let record_offset = self.position;
            put_u32(&mut tail, 0x0606_4b50);
            put_u64(&mut tail, 44); // size of the rest of this record
            put_u16(&mut tail, MADE_BY_UNIX | VERSION_ZIP64);
            put_u16(&mut tail, VERSION_ZIP64);
            put_u32(&mut tail, 0); // this disk
            put_u32(&mut tail, 0); // disk of the central directory
            put_u64(&mut tail, count);
            put_u64(&mut tail, count);
            put_u64(&mut tail, cd_size);
            put_u64(&mut tail, cd_offset);
            // The locator.
            put_u32(&mut tail, 0x0706_4b50);
            put_u32(&mut tail, 0); // disk of the ZIP64 end record
            put_u64(&mut tail, record_offset);
            put_u32(&mut tail, 1); // total disks
        }
        // With ZIP64 the classic fields hold the "see ZIP64" markers, so a
        // reader cannot silently use truncated values.
        let (count16, size32, offset32) = if zip64_end {
            (MAX_16, MAX_32, MAX_32)
        } else {
            (count, cd_size, cd_offset)
        };
        put_u32(&mut tail, 0x0605_4b50);
        put_u16(&mut tail, 0); // this disk
        put_u16(&mut tail, 0); // disk of the central directory
        put_u16(&mut tail, count16 as u16);
        put_u16(&mut tail, count16 as u16);
        put_u32(&mut tail, size32 as u32);
        put_u32(&mut tail, offset32 as u32);
        put_u16(&mut tail, 0); // comment length
        self.write(&tail)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.position += bytes.len() as u64;
        Ok(())
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// MS-DOS time and date of a civil time; DOS dates cover 1980–2107.
fn dos_date_time(c: &Civil) -> (u16, u16) {
    if c.year < 1980 {
        return (0, (1 << 5) | 1);
    }
    if c.year > 2107 {
        return ((23 << 11) | (59 << 5) | 29, (127 << 9) | (12 << 5) | 31);
    }
    let time = (u16::from(c.hour) << 11) | (u16::from(c.minute) << 5) | u16::from(c.second / 2);
    let date = (((c.year - 1980) as u16) << 9) | (u16::from(c.month) << 5) | u16::from(c.day);
    (time, date)
}

// ---- the manifest -------------------------------------------------------------

/// One log file as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Base name (the archive entry name).
    pub name: String,
    /// Lowercase hex SHA-256 of the exported bytes.
    pub sha256: String,
    /// Byte count.
    pub size: u64,
}

/// The exact bytes of `manifest.json` (AUDIT.md §11.4).
pub fn manifest_json(exported_at: &str, files: &[ManifestEntry]) -> String {
    let files: Vec<Value> = files
        .iter()
        .map(|f| json!({"name": f.name, "sha256": f.sha256, "size": f.size}))
        .collect();
    let mut manifest = Map::new();
    manifest.insert("exported_at".into(), json!(exported_at));
    manifest.insert("files".into(), Value::Array(files));
    manifest.insert("key_username".into(), json!(KEY_USERNAME));
    python_dumps_sorted_ascii(&Value::Object(manifest))
}

/// Python's `json.dumps(value, sort_keys=True)`: keys sorted by code point
/// at every level, `", "` and `": "` separators, ASCII-only output.
pub fn python_dumps_sorted_ascii(value: &Value) -> String {
    let mut out = String::new();
    push_ascii(&mut out, value);
    out
}

fn push_ascii(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                // Only finite floats can be in a `Value`.
                out.push_str(
                    &n.as_f64()
                        .and_then(|f| repr_f64(f).ok())
                        .unwrap_or_default(),
                );
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => push_ascii_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_ascii(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Python compares `str` keys by code point, which is the byte
            // order of their UTF-8.
            let mut members: Vec<_> = map.iter().collect();
            members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_ascii_string(out, k);
                out.push_str(": ");
                push_ascii(out, v);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Python's `ensure_ascii=True` writes it: short escapes
/// for `"` `\` and five controls, `\uXXXX` (lowercase) for everything else
/// outside space..`~`, UTF-16 surrogate pairs above U+FFFF.
fn push_ascii_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

// ---- the bundle ---------------------------------------------------------------

/// How an export is stamped.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// `exported_at` of the manifest (`YYYY-MM-DDTHH:MM:SS.ffffff+00:00`).
    pub exported_at: String,
    /// The entries' modification time (local civil time).
    pub modified: Civil,
    /// Write ZIP64 records even when nothing needs them (tests).
    pub force_zip64: bool,
}

/// What an export produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The log files in the archive, in archive order.
    pub files: Vec<ManifestEntry>,
    /// `manifest.sig`: lowercase hex HMAC-SHA256 of the manifest.
    pub signature: String,
}

/// Removes the temporary file unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes the bundle of `logs` (in this order) to `output`, which must not
/// exist. Log files that cannot be read are [`AuditError::Read`]; anything
/// about the output is [`AuditError::OutputExists`] or
/// [`AuditError::Output`].
pub fn export(
    logs: &[PathBuf],
    output: &Path,
    key: &AuditKey,
    options: &ExportOptions,
) -> Result<Exported, AuditError> {
    export_with_progress(logs, output, key, options, &mut |_, _| {})
}

/// [`export`], reporting `(bytes of logs read so far, bytes in all logs)`
/// as it goes (for a progress display).
pub fn export_with_progress(
    logs: &[PathBuf],
    output: &Path,
    key: &AuditKey,
    options: &ExportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Exported, AuditError> {
    let out_err = |what: &str, e: &dyn std::fmt::Display| {
        AuditError::Output(format!("{what} {}: {e}", output.display()))
    };
    if output.symlink_metadata().is_ok() {
        return Err(AuditError::OutputExists(output.to_owned()));
    }
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let Some(out_name) = output.file_name() else {
        return Err(AuditError::Output(format!(
            "{} does not name a file",
            output.display()
        )));
    };

    let (mut file, temp) = create_temp(&dir, &out_name.to_string_lossy())
        .map_err(|e| out_err("cannot create a temporary file for", &e))?;
    let mut temp = TempFile {
        path: temp,
        keep: false,
    };

    let mut zip = ZipWriter::new(BufWriter::new(&mut file), &options.modified);
    zip.force_zip64(options.force_zip64);
    let mut files = Vec::with_capacity(logs.len());
    // Sizes as listed; a log growing meanwhile only pushes the count past
    // the total, which the display clamps.
    let total: u64 = logs
        .iter()
        .filter_map(|log| std::fs::metadata(log).ok())
        .map(|m| m.len())
        .sum();
    let mut done = 0u64;
    for log in logs {
        let name = base_name(log);
        let read_err =
            |e: &dyn std::fmt::Display| AuditError::Read(format!("{}: {e}", log.display()));
        let mut input = File::open(log).map_err(|e| read_err(&e))?;
        let limit = input.metadata().map_err(|e| read_err(&e))?.len();
        // A read error and a write error look the same from inside `add`;
        // `Tagged` tells them apart.
        let mut tagged = Tagged {
            inner: &mut input,
            failed: None,
            read: 0,
            progress: &mut |read| progress(done + read, total),
        };
        let added = zip.add(&name, &mut tagged, limit);
        let read_here = tagged.read;
        let failed = tagged.failed.take();
        done += read_here;
        let digest = match added {
            Ok(digest) => digest,
            Err(e) => {
                return Err(match failed {
                    Some(read) => read_err(&read),
                    None => out_err("cannot write", &e),
                });
            }
        };
        files.push(ManifestEntry {
            name,
            sha256: digest.sha256,
            size: digest.size,
        });
    }
    let manifest = manifest_json(&options.exported_at, &files);
    let signature = key.hmac_hex(manifest.as_bytes());
    zip.add(
        "manifest.json",
        &mut manifest.as_bytes(),
        manifest.len() as u64,
    )
    .and_then(|_| zip.add("manifest.sig", &mut signature.as_bytes(), 64))
    .and_then(|_| zip.finish())
    .and_then(|mut writer| writer.flush())
    .map_err(|e| out_err("cannot write", &e))?;
    file.sync_all().map_err(|e| out_err("cannot sync", &e))?;
    drop(file);

    install(&temp.path, output, &dir)?;
    temp.keep = true;
    Ok(Exported { files, signature })
}

/// A reader that remembers its own failure and reports what it read.
struct Tagged<'a> {
    inner: &'a mut dyn Read,
    failed: Option<io::Error>,
    read: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl Read for Tagged<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).inspect_err(|e| {
            self.failed = Some(io::Error::new(e.kind(), e.to_string()));
        })?;
        self.read += n as u64;
        (self.progress)(self.read);
        Ok(n)
    }
}

/// Creates `.<name>.<random>.tmp` in `dir`, exclusively, mode 0600.
fn create_temp(dir: &Path, name: &str) -> io::Result<(File, PathBuf)> {
    for _ in 0..16 {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
        let path = dir.join(format!(".{name}.{}.tmp", hex(&random)));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name",
    ))
}

/// Moves the finished archive to `output` without ever replacing a file
/// there, then syncs the directory so the new name is durable.
fn install(temp: &Path, output: &Path, dir: &Path) -> Result<(), AuditError> {
    let dir_fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| AuditError::Output(format!("cannot open {}: {e}", dir.display())))?;
    let (Some(from), Some(to)) = (temp.file_name(), output.file_name()) else {
        return Err(AuditError::Output(format!(
            "{} does not name a file",
            output.display()
        )));
    };
    match rustix::fs::renameat_with(&dir_fd, from, &dir_fd, to, RenameFlags::NOREPLACE) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => return Err(AuditError::OutputExists(output.to_owned())),
        // File systems without RENAME_NOREPLACE: a hard link also fails
        // when the name exists.
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => {
            match rustix::fs::linkat(&dir_fd, from, &dir_fd, to, rustix::fs::AtFlags::empty()) {
                Ok(()) => {
                    let _ = rustix::fs::unlinkat(&dir_fd, from, rustix::fs::AtFlags::empty());
                }
                Err(rustix::io::Errno::EXIST) => {
                    return Err(AuditError::OutputExists(output.to_owned()));
                }
                Err(e) => {
                    return Err(AuditError::Output(format!(
                        "cannot create {}: {e}",
                        output.display()
                    )));
                }
            }
        }
        Err(e) => {
            return Err(AuditError::Output(format!(
                "cannot create {}: {e}",
                output.display()
            )));
        }
    }
    rustix::fs::fsync(&dir_fd)
        .map_err(|e| AuditError::Output(format!("cannot sync {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(Crc32::of(b"123456789"), 0xCBF4_3926);
        assert_eq!(Crc32::of(b""), 0);
    }

    #[test]
    fn ascii_dumps_escapes_like_python() {
        let v = json!({"b": "é\u{1F600}\u{7f}\"\\\n", "a": [1, 2.5, null, true]});
        assert_eq!(
            python_dumps_sorted_ascii(&v),
            r#"{"a": [1, 2.5, null, true], "b": "\u00e9\ud83d\ude00\u007f\"\\\n"}"#
        );
    }

    #[test]
    fn dos_time_packs_fields_and_clamps_the_range() {
        let c = Civil {
            year: 2024,
            month: 4,
            day: 5,
            hour: 19,
            minute: 41,
            second: 21,
            micros: 0,
        };
        assert_eq!(
            dos_date_time(&c),
            ((19 << 11) | (41 << 5) | 10, (44 << 9) | (4 << 5) | 5)
        );
        let old = Civil { year: 1970, ..c };
        assert_eq!(dos_date_time(&old), (0, 33));
    }
}
