//! The `mime_type` guess of FILE_STAT (FILES.md §3.4): a pure function of a
//! file name.
//!
//! This module owns the extension split, the suffix aliases, the
//! compression-suffix rule and the normative extension table. It must never
//! look at file contents and never read a host MIME database
//! (`/etc/mime.types` and the like): the answer has to be identical on every
//! machine, so the table below is the only source of truth.

use std::borrow::Cow;

/// Suffix aliases (FILES.md §3.4 step 2), case-sensitive: `.TGZ` is no alias.
const SUFFIX_ALIASES: &[(&str, &str)] = &[
    (".svgz", ".svg.gz"),
    (".tgz", ".tar.gz"),
    (".taz", ".tar.gz"),
    (".tz", ".tar.gz"),
    (".tbz2", ".tar.bz2"),
    (".txz", ".tar.xz"),
];

/// Compression suffixes (FILES.md §3.4 step 3), case-sensitive. They name an
/// encoding rather than a type, so they are dropped and the remainder decides.
const COMPRESSION_SUFFIXES: &[&str] = &[".gz", ".Z", ".bz2", ".xz", ".br"];

/// The normative table of FILES.md §3.4, one row per extension, sorted
/// bytewise by extension so that it can be binary-searched. Unit tests pin
/// the order, the absence of duplicates and the row count.
static TYPES_BY_EXTENSION: &[(&str, &str)] = &[
    (".3g2", "audio/3gpp2"),
    (".3gp", "audio/3gpp"),
    (".3gpp", "audio/3gpp"),
    (".3gpp2", "audio/3gpp2"),
    (".a", "application/octet-stream"),
    (".aac", "audio/aac"),
    (".adts", "audio/aac"),
    (".ai", "application/postscript"),
    (".aif", "audio/x-aiff"),
    (".aifc", "audio/x-aiff"),
    (".aiff", "audio/x-aiff"),
    (".ass", "audio/aac"),
    (".au", "audio/basic"),
    (".avi", "video/x-msvideo"),
    (".avif", "image/avif"),
    (".bat", "text/plain"),
    (".bcpio", "application/x-bcpio"),
    (".bin", "application/octet-stream"),
    (".bmp", "image/bmp"),
    (".c", "text/plain"),
    (".cdf", "application/x-netcdf"),
    (".cpio", "application/x-cpio"),
    (".csh", "application/x-csh"),
    (".css", "text/css"),
    (".csv", "text/csv"),
    (".dll", "application/octet-stream"),
    (".doc", "application/msword"),
    (".dot", "application/msword"),
    (".dvi", "application/x-dvi"),
    (".eml", "message/rfc822"),
    (".eps", "application/postscript"),
    (".etx", "text/x-setext"),
    (".exe", "application/octet-stream"),
    (".gif", "image/gif"),
    (".gtar", "application/x-gtar"),
    (".h", "text/plain"),
    (".h5", "application/x-hdf5"),
    (".hdf", "application/x-hdf"),
    (".heic", "image/heic"),
    (".heif", "image/heif"),
    (".htm", "text/html"),
    (".html", "text/html"),
    (".ico", "image/vnd.microsoft.icon"),
    (".ief", "image/ief"),
    (".jpe", "image/jpeg"),
    (".jpeg", "image/jpeg"),
    (".jpg", "image/jpeg"),
    (".js", "text/javascript"),
    (".json", "application/json"),
    (".ksh", "text/plain"),
    (".latex", "application/x-latex"),
    (".loas", "audio/aac"),
    (".m1v", "video/mpeg"),
    (".m3u", "application/vnd.apple.mpegurl"),
    (".m3u8", "application/vnd.apple.mpegurl"),
    (".man", "application/x-troff-man"),
    (".markdown", "text/markdown"),
    (".md", "text/markdown"),
    (".me", "application/x-troff-me"),
    (".mht", "message/rfc822"),
    (".mhtml", "message/rfc822"),
    (".mif", "application/x-mif"),
    (".mjs", "text/javascript"),
    (".mov", "video/quicktime"),
    (".movie", "video/x-sgi-movie"),
    (".mp2", "audio/mpeg"),
    (".mp3", "audio/mpeg"),
    (".mp4", "video/mp4"),
    (".mpa", "video/mpeg"),
    (".mpe", "video/mpeg"),
    (".mpeg", "video/mpeg"),
    (".mpg", "video/mpeg"),
    (".ms", "application/x-troff-ms"),
    (".n3", "text/n3"),
    (".nc", "application/x-netcdf"),
    (".nq", "application/n-quads"),
    (".nt", "application/n-triples"),
    (".nws", "message/rfc822"),
    (".o", "application/octet-stream"),
    (".obj", "application/octet-stream"),
    (".oda", "application/oda"),
    (".opus", "audio/opus"),
    (".p12", "application/x-pkcs12"),
    (".p7c", "application/pkcs7-mime"),
    (".pbm", "image/x-portable-bitmap"),
    (".pdf", "application/pdf"),
    (".pfx", "application/x-pkcs12"),
    (".pgm", "image/x-portable-graymap"),
    (".pl", "text/plain"),
    (".png", "image/png"),
    (".pnm", "image/x-portable-anymap"),
    (".pot", "application/vnd.ms-powerpoint"),
    (".ppa", "application/vnd.ms-powerpoint"),
    (".ppm", "image/x-portable-pixmap"),
    (".pps", "application/vnd.ms-powerpoint"),
    (".ppt", "application/vnd.ms-powerpoint"),
    (".ps", "application/postscript"),
    (".pwz", "application/vnd.ms-powerpoint"),
    (".py", "text/x-python"),
    (".pyc", "application/x-python-code"),
    (".pyo", "application/x-python-code"),
    (".qt", "video/quicktime"),
    (".ra", "audio/x-pn-realaudio"),
    (".ram", "application/x-pn-realaudio"),
    (".ras", "image/x-cmu-raster"),
    (".rdf", "application/xml"),
    (".rgb", "image/x-rgb"),
    (".roff", "application/x-troff"),
    (".rst", "text/x-rst"),
    (".rtf", "text/rtf"),
    (".rtx", "text/richtext"),
    (".sgm", "text/x-sgml"),
    (".sgml", "text/x-sgml"),
    (".sh", "application/x-sh"),
    (".shar", "application/x-shar"),
    (".snd", "audio/basic"),
    (".so", "application/octet-stream"),
    (".src", "application/x-wais-source"),
    (".srt", "text/plain"),
    (".sv4cpio", "application/x-sv4cpio"),
    (".sv4crc", "application/x-sv4crc"),
    (".svg", "image/svg+xml"),
    (".swf", "application/x-shockwave-flash"),
    (".t", "application/x-troff"),
    (".tar", "application/x-tar"),
    (".tcl", "application/x-tcl"),
    (".tex", "application/x-tex"),
    (".texi", "application/x-texinfo"),
    (".texinfo", "application/x-texinfo"),
    (".tif", "image/tiff"),
    (".tiff", "image/tiff"),
    (".tr", "application/x-troff"),
    (".trig", "application/trig"),
    (".tsv", "text/tab-separated-values"),
    (".txt", "text/plain"),
    (".ustar", "application/x-ustar"),
    (".vcf", "text/x-vcard"),
    (".vtt", "text/vtt"),
    (".wasm", "application/wasm"),
    (".wav", "audio/x-wav"),
    (".webm", "video/webm"),
    (".webmanifest", "application/manifest+json"),
    (".webp", "image/webp"),
    (".wiz", "application/msword"),
    (".wsdl", "application/xml"),
    (".xbm", "image/x-xbitmap"),
    (".xlb", "application/vnd.ms-excel"),
    (".xls", "application/vnd.ms-excel"),
    (".xml", "text/xml"),
    (".xpdl", "application/xml"),
    (".xpm", "image/x-xpixmap"),
    (".xsl", "application/xml"),
    (".xwd", "image/x-xwindowdump"),
    (".zip", "application/zip"),
];

/// Guesses the MIME type of the file called `name` from its extension alone
/// (FILES.md §3.4); `None` when there is no extension or the table does not
/// know it.
///
/// `name` is meant to be the final component of the reported path. Should it
/// contain a `/` anyway, only the text after the last `/` can supply the
/// extension, as with any path-aware extension split.
pub fn guess(name: &str) -> Option<&'static str> {
    // Step 2: an alias rewrites the name (`a.tgz` → `a.tar.gz`), which is
    // then split again. Every replacement ends in `.gz`, `.bz2` or `.xz`, none
    // of which is an alias, so this loop runs at most twice.
    let mut current = Cow::Borrowed(name);
    loop {
        let (base, ext) = split_extension(&current);
        match alias_for(ext) {
            Some(replacement) => current = Cow::Owned(format!("{base}{replacement}")),
            None => break,
        }
    }

    // Step 3: drop one compression suffix and split the remainder once more.
    let (base, mut ext) = split_extension(&current);
    if COMPRESSION_SUFFIXES.contains(&ext) {
        ext = split_extension(base).1;
    }

    // Step 4: exact, then lower-case. Full Unicode lower-casing is used on
    // purpose: it is what "lower-case form" means for the reference, and it
    // maps e.g. the Kelvin sign U+212A onto an ASCII `k`.
    if ext.is_empty() {
        return None;
    }
    find(ext).or_else(|| find(&ext.to_lowercase()))
}

/// Splits `name` into `(base, extension)` where the extension runs from the
/// last `.` to the end — but only when at least one character other than `.`
/// precedes that dot within the last path component. Otherwise the
/// extension is empty: `.bashrc` and `..txt` have none, `a.` has `.`.
fn split_extension(name: &str) -> (&str, &str) {
    let component_start = name.rfind('/').map_or(0, |slash| slash + 1);
    let Some(dot) = name.rfind('.') else {
        return (name, "");
    };
    let stem = name.get(component_start..dot).unwrap_or("");
    if stem.bytes().any(|b| b != b'.') {
        name.split_at_checked(dot).unwrap_or((name, ""))
    } else {
        (name, "")
    }
}

fn alias_for(ext: &str) -> Option<&'static str> {
    SUFFIX_ALIASES
        .iter()
        .find(|(alias, _)| *alias == ext)
        .map(|(_, replacement)| *replacement)
}

fn find(ext: &str) -> Option<&'static str> {
    TYPES_BY_EXTENSION
        .binary_search_by(|(known, _)| (*known).cmp(ext))
        .ok()
        .and_then(|row| TYPES_BY_EXTENSION.get(row))
        .map(|(_, mime)| *mime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_strictly_sorted_so_binary_search_is_sound() {
        // Strictly ascending means sorted and free of duplicates at once.
        for pair in TYPES_BY_EXTENSION.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{:?} !< {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn table_has_every_extension_of_the_specification() {
        // FILES.md §3.4 lists 154 extensions for 99 types.
        assert_eq!(TYPES_BY_EXTENSION.len(), 154);
        let mut types: Vec<&str> = TYPES_BY_EXTENSION.iter().map(|(_, t)| *t).collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), 99);
    }

    #[test]
    fn table_keys_are_lower_case_dotted_extensions() {
        // The lower-case fallback can only find keys that are lower case.
        for (ext, mime) in TYPES_BY_EXTENSION {
            assert!(ext.starts_with('.') && ext.len() > 1, "{ext}");
            assert!(!ext[1..].contains('.'), "{ext}");
            assert_eq!(*ext, ext.to_lowercase(), "{ext}");
            assert!(mime.contains('/'), "{mime}");
        }
    }

    #[test]
    fn every_table_row_is_reachable_through_guess() {
        for (ext, mime) in TYPES_BY_EXTENSION {
            assert_eq!(guess(&format!("file{ext}")), Some(*mime), "{ext}");
        }
    }

    #[test]
    fn no_alias_or_compression_suffix_is_in_the_table() {
        // Otherwise the order of steps 2–4 would be observable in odd ways.
        for (alias, _) in SUFFIX_ALIASES {
            assert_eq!(find(alias), None, "{alias}");
        }
        for suffix in COMPRESSION_SUFFIXES {
            assert_eq!(find(suffix), None, "{suffix}");
            assert_eq!(find(&suffix.to_lowercase()), None, "{suffix}");
        }
    }

    #[test]
    fn split_extension_follows_the_leading_dot_rule() {
        assert_eq!(split_extension("a.txt"), ("a", ".txt"));
        assert_eq!(split_extension("a..txt"), ("a.", ".txt"));
        assert_eq!(split_extension(".bashrc"), (".bashrc", ""));
        assert_eq!(split_extension("..txt"), ("..txt", ""));
        assert_eq!(split_extension("a."), ("a", "."));
        assert_eq!(split_extension("noext"), ("noext", ""));
        assert_eq!(split_extension(""), ("", ""));
        assert_eq!(split_extension("d.x/file"), ("d.x/file", ""));
        assert_eq!(split_extension("d/.hidden"), ("d/.hidden", ""));
        assert_eq!(split_extension("d/f.txt"), ("d/f", ".txt"));
    }
}
