//! Log lines on stderr (CLI.md §2): `<local timestamp> <LEVEL> <component>:
//! <message>`, filtered by `--log-level`.
//!
//! A [`Log`] is cheap to clone and usable from every thread; each line is
//! written with one call under a lock, so lines from different threads never
//! interleave. It must never receive a secret: callers build messages from
//! values that are not tokens, keys or passphrases, and every message is
//! flattened to one line here, because messages often quote text the
//! platform or the network chose.

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::LogLevel;
use crate::timefmt;

/// Where log lines go and which are kept.
#[derive(Clone)]
pub struct Log {
    level: LogLevel,
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log").field("level", &self.level).finish()
    }
}

impl Log {
    /// Lines at `level` and above go to the process's stderr.
    pub fn stderr(level: LogLevel) -> Log {
        Log::to_writer(level, Box::new(std::io::stderr()))
    }

    /// Lines at `level` and above go to `sink`.
    pub fn to_writer(level: LogLevel, sink: Box<dyn Write + Send>) -> Log {
        Log {
            level,
            sink: Arc::new(Mutex::new(sink)),
        }
    }

    /// Whether a line at `level` would be written.
    pub fn enabled(&self, level: LogLevel) -> bool {
        level >= self.level
    }

    /// Writes one line. A failing stderr is not worth stopping the daemon
    /// for, so write errors are ignored.
    pub fn line(&self, level: LogLevel, component: &str, message: impl fmt::Display) {
        if !self.enabled(level) {
            return;
        }
        let text = format!(
            "{} {} {}: {}\n",
            stamp(),
            level.as_str(),
            component,
            crate::text::one_line(&message.to_string())
        );
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = sink.write_all(text.as_bytes());
        let _ = sink.flush();
    }

    /// An `INFO` line.
    pub fn info(&self, component: &str, message: impl fmt::Display) {
        self.line(LogLevel::Info, component, message);
    }

    /// A `WARNING` line.
    pub fn warn(&self, component: &str, message: impl fmt::Display) {
        self.line(LogLevel::Warning, component, message);
    }

    /// An `ERROR` line.
    pub fn error(&self, component: &str, message: impl fmt::Display) {
        self.line(LogLevel::Error, component, message);
    }

    /// A `DEBUG` line.
    pub fn debug(&self, component: &str, message: impl fmt::Display) {
        self.line(LogLevel::Debug, component, message);
    }
}

/// `YYYY-MM-DD HH:MM:SS,mmm` in local time, the layout of the reference's
/// log lines.
fn stamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let c = timefmt::local_zone().civil(seconds);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}",
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_below_the_level_are_dropped_and_others_are_one_line() {
        let buffer = Buffer::default();
        let log = Log::to_writer(LogLevel::Warning, Box::new(buffer.clone()));
        log.info("daemon", "hidden");
        log.warn("daemon", "two\nlines");
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(" WARNING daemon: two"), "{text}");
        assert!(!text.contains("hidden"));
    }
}
