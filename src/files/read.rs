//! `FILE_READ` (FILES.md §1): a byte range of one regular file, as UTF-8
//! text or base64. Only regular files are read — a FIFO or device would block
//! or never end — and the file is read through the descriptor the jail opened,
//! never re-opened by name.

use rustix::fs::{FileType, Mode, OFlags};
use serde_json::json;

use super::{FileContext, FileError, FileOutcome, JailedError, SizeExcess, Step, jailed, os_error};
use crate::audit::Details;
use crate::protocol::{
    Encoding, FileContents, FileRead, MAX_WIRE_BASE64_CONTENT_BYTES, MAX_WIRE_TEXT_CONTENT_BYTES,
    Message, MessageType, ReadFormat,
};

/// Bytes read per `pread` call; a multiple of three, so that base64 content
/// is encoded a whole chunk at a time. Small, because every worker's
/// allocator arena keeps what it frees up to a bound (`sys::tune_allocator`):
/// 768 KiB chunks left ten workers holding 6 MiB more after a few large
/// reads, for no measurable speed.
const CHUNK: usize = 3 << 16;

/// Handles one `FILE_READ`.
pub fn read(ctx: &FileContext<'_>, req: &FileRead) -> FileOutcome {
    let mut shown = None;
    let result = jailed(ctx.jail, &req.path, |d| {
        shown = Some(d.resolved.clone());
        if d.looped {
            // A loop on a followed path is "does not exist" (FILES.md §0.4).
            return Err(Step::Fail(FileError::not_found(&d.resolved)));
        }
        let fd = ctx.jail.open(
            &d.remainder,
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Step::Fail(os_error(&d.resolved, e)))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => {
                return Err(Step::Fail(FileError::internal(format!(
                    "{} is a directory, not a file",
                    d.resolved
                ))));
            }
            _ => {
                return Err(Step::Fail(FileError::internal(format!(
                    "{} is not a regular file",
                    d.resolved
                ))));
            }
        }
        if ctx.refuse_multilink_reads && st.st_nlink > 1 {
            return Err(Step::Fail(FileError::internal(format!(
                "{} has more than one hard link; refusing to read it",
                d.resolved
            ))));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        read_range(ctx, req, &fd, size, &d.resolved).map_err(Step::Fail)
    });
    let path = shown.unwrap_or_default();
    let (reply, returned) = match result {
        Ok(contents) => {
            let n = contents.size_bytes;
            (Ok(Message::FileContents(contents)), n)
        }
        Err(JailedError::Rejected(r)) => {
            return FileOutcome::rejected(r, req.path.clone(), MessageType::FileRead);
        }
        Err(JailedError::Failed(e)) => (Err(e), 0),
    };
    FileOutcome {
        reply,
        audit: super::Audit::Operation(details(req, &path, returned)),
    }
}

fn details(req: &FileRead, path: &str, returned: u64) -> Details {
    let mut d = Details::new();
    d.insert("path", json!(path));
    d.insert("encoding", json!(req.encoding.as_str()));
    d.insert("offset", json!(req.offset));
    d.insert("length", json!(req.length.map(|n| n.get())));
    d.insert("size_bytes_returned", json!(returned));
    d
}

/// Steps 6–12 of FILES.md §1.2 on an open regular file of `size` bytes.
fn read_range(
    ctx: &FileContext<'_>,
    req: &FileRead,
    fd: &std::os::fd::OwnedFd,
    size: u64,
    shown: &str,
) -> Result<FileContents, FileError> {
    let binary = req.format == ReadFormat::Bytes || req.encoding == Encoding::Base64;
    let wire_cap = if binary {
        MAX_WIRE_BASE64_CONTENT_BYTES
    } else {
        MAX_WIRE_TEXT_CONTENT_BYTES
    };
    let limit = ctx.max_file_size_bytes.min(wire_cap as u64);
    let remaining = size.saturating_sub(req.offset);
    let requested = req.length.map_or(remaining, |n| n.get());
    if requested > limit {
        // Only the text cap refused it when base64 would carry it.
        let base64_limit = ctx
            .max_file_size_bytes
            .min(MAX_WIRE_BASE64_CONTENT_BYTES as u64);
        return Err(FileError::too_large(
            format!("Requested read of {requested} bytes exceeds limit {limit}"),
            SizeExcess {
                max_file_size_bytes: ctx.max_file_size_bytes,
                attempted_bytes: requested,
                base64_would_fit: !binary && requested <= base64_limit,
            },
        ));
    }
    // `requested` ≤ limit ≤ 12.5 MB, so it fits in memory and in usize.
    let want = usize::try_from(requested).unwrap_or(0);
    let expected = want.min(usize::try_from(remaining).unwrap_or(want));
    // At or past the end there is nothing to read (and an offset beyond
    // i64::MAX would make pread fail with EINVAL).
    let want = if req.offset >= size { 0 } else { want };
    let (content, encoding, read) = if binary {
        // Encoded as it is read, a chunk at a time: the file's bytes are
        // never held whole beside their text, and the text is never grown
        // (the response is sent around this buffer, see `Encoded`).
        let mut text = String::with_capacity(super::base64::encoded_len(expected));
        let mut chunk = vec![0; want.min(CHUNK)];
        let read = read_chunks(fd, req.offset, want, shown, &mut chunk, |bytes| {
            super::base64::encode_into(bytes, &mut text);
        })?;
        (text, Encoding::Base64, read)
    } else {
        let mut buf = Vec::with_capacity(expected);
        let read = read_all(fd, req.offset, want, shown, &mut buf)?;
        let text = String::from_utf8(buf)
            // Valid UTF-8 (the common case) is moved, not copied.
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        (text, Encoding::Utf8, read)
    };
    let read = read as u64;
    let truncated = req.offset.saturating_add(read) < size;
    Ok(FileContents {
        content,
        encoding,
        size_bytes: read,
        truncated,
    })
}

/// Reads up to `want` bytes from `offset`, fewer at the end of the file,
/// appending them to `buf`. Returns the bytes read.
fn read_all(
    fd: &std::os::fd::OwnedFd,
    mut offset: u64,
    want: usize,
    shown: &str,
    buf: &mut Vec<u8>,
) -> Result<usize, FileError> {
    let start = buf.len();
    while buf.len() - start < want {
        let filled = buf.len();
        buf.resize(filled + (want - (filled - start)).min(CHUNK), 0);
        let n = pread_at(fd, &mut buf[filled..], offset, shown)?;
        buf.truncate(filled + n);
        if n == 0 {
            break;
        }
        offset += n as u64;
    }
    Ok(buf.len() - start)
}

/// Reads up to `want` bytes from `offset`, fewer at the end of the file,
/// through `chunk`, handing each full chunk to `take` and then what is left
/// at the end. Returns the bytes read.
fn read_chunks(
    fd: &std::os::fd::OwnedFd,
    mut offset: u64,
    want: usize,
    shown: &str,
    chunk: &mut [u8],
    mut take: impl FnMut(&[u8]),
) -> Result<usize, FileError> {
    let mut read = 0;
    let mut filled = 0;
    while read < want && !chunk.is_empty() {
        let room = (chunk.len() - filled).min(want - read);
        let n = pread_at(fd, &mut chunk[filled..filled + room], offset, shown)?;
        read += n;
        offset += n as u64;
        filled += n;
        let end = n == 0 || read == want;
        if filled == chunk.len() || (end && filled > 0) {
            take(&chunk[..filled]);
            filled = 0;
        }
        if end {
            break;
        }
    }
    Ok(read)
}

/// One `pread`, retried when interrupted.
fn pread_at(
    fd: &std::os::fd::OwnedFd,
    buf: &mut [u8],
    offset: u64,
    shown: &str,
) -> Result<usize, FileError> {
    loop {
        match rustix::io::pread(fd, &mut *buf, offset) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(os_error(shown, e)),
        }
    }
}
