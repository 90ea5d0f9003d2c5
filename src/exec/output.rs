//! The shared output budget of a command (EXEC.md §7): stdout and stderr
//! fill one budget in arrival order, the excess is counted but dropped,
//! and truncated output ends with the marker and totals exactly the budget.
//!
//! Pure bookkeeping: this module never reads a descriptor. It must never
//! keep more than the budget, whatever the child writes.

/// The highest budget: (16 MiB − 64 KiB) ÷ 6, so the reply frame stays
/// below 16 MiB even if every byte needs a six-byte JSON escape.
pub const TEXT_CAP: u64 = 2_785_280;

/// Appended to stderr when output was discarded.
pub const MARKER: &[u8; 28] = b"\n[command output truncated]\n";

/// Which pipe a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
}

/// Output collected so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collector {
    budget: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

/// The final output, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Retained stdout, U+FFFD for invalid UTF-8.
    pub stdout: String,
    /// Retained stderr (ending with the marker when truncated).
    pub stderr: String,
    /// Something was discarded.
    pub truncated: bool,
}

impl Collector {
    /// A collector for `max_file_size_bytes`, capped at [`TEXT_CAP`].
    pub fn new(max_file_size_bytes: u64) -> Self {
        // TEXT_CAP fits every usize this crate targets (32 bits and up).
        let budget = usize::try_from(max_file_size_bytes.min(TEXT_CAP)).unwrap_or(usize::MAX);
        Self {
            budget,
            stdout: Vec::new(),
            stderr: Vec::new(),
            truncated: false,
        }
    }

    /// Takes one chunk read from `stream`: as much as the shared budget
    /// still allows is kept, the rest dropped.
    pub fn push(&mut self, stream: Stream, chunk: &[u8]) {
        let remaining = self.budget - self.stdout.len() - self.stderr.len();
        let kept = chunk.len().min(remaining);
        if kept < chunk.len() {
            self.truncated = true;
        }
        let target = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        target.extend_from_slice(&chunk[..kept]);
    }

    /// The raw retained bytes after the marker rule, before decoding.
    pub fn finish_raw(mut self) -> (Vec<u8>, Vec<u8>, bool) {
        if self.truncated && self.budget > 0 {
            let marker = &MARKER[..MARKER.len().min(self.budget)];
            let total = self.stdout.len() + self.stderr.len() + marker.len();
            let mut excess = total.saturating_sub(self.budget);
            let from_stdout = excess.min(self.stdout.len());
            self.stdout.truncate(self.stdout.len() - from_stdout);
            excess -= from_stdout;
            let from_stderr = excess.min(self.stderr.len());
            self.stderr.truncate(self.stderr.len() - from_stderr);
            self.stderr.extend_from_slice(marker);
        }
        (self.stdout, self.stderr, self.truncated)
    }

    /// The final output, each stream decoded separately.
    pub fn finish(self) -> Collected {
        let (stdout, stderr, truncated) = self.finish_raw();
        Collected {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_trims_stdout_for_the_marker() {
        let mut c = Collector::new(1024);
        c.push(Stream::Stdout, &[b'o'; 100_000]);
        c.push(Stream::Stderr, &[b'e'; 100_000]);
        let (out, err, truncated) = c.finish_raw();
        assert!(truncated);
        assert_eq!(out, vec![b'o'; 996]);
        assert_eq!(err, MARKER.to_vec());
    }

    #[test]
    fn small_budget_cuts_the_marker() {
        let mut c = Collector::new(5);
        c.push(Stream::Stderr, b"0123456789");
        let (out, err, _) = c.finish_raw();
        assert!(out.is_empty());
        assert_eq!(err, MARKER[..5].to_vec());
    }

    #[test]
    fn stderr_is_trimmed_after_stdout_runs_out() {
        let mut c = Collector::new(40);
        c.push(Stream::Stdout, b"0123456789");
        c.push(Stream::Stderr, &[b'e'; 40]);
        let (out, err, _) = c.finish_raw();
        assert!(out.is_empty());
        assert_eq!(err.len(), 40);
        assert!(err.ends_with(MARKER));
    }

    #[test]
    fn zero_budget_keeps_nothing_and_adds_no_marker() {
        let mut c = Collector::new(0);
        c.push(Stream::Stdout, b"x");
        assert_eq!(c.finish_raw(), (Vec::new(), Vec::new(), true));
    }

    #[test]
    fn fitting_output_is_untouched() {
        let mut c = Collector::new(10);
        c.push(Stream::Stdout, b"abc");
        c.push(Stream::Stderr, b"defghij");
        assert_eq!(
            c.finish_raw(),
            (b"abc".to_vec(), b"defghij".to_vec(), false)
        );
    }
}
