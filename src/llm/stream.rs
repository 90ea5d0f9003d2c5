//! Ollama's NDJSON chat stream (CAPABILITIES.md §5.2 step 6): lines read
//! with a byte limit each, and what one line says.
//!
//! A line longer than [`MAX_LINE_BYTES`] is dropped whole, without holding
//! it, as a line that is not JSON would be.

use std::io::{self, Read};

use serde_json::Value;

use crate::protocol::FinishReason;

/// The longest line kept.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Bytes read from the body at once.
const READ_BYTES: usize = 16 * 1024;

/// Splits a body into lines.
#[derive(Debug, Default)]
pub struct Lines {
    buffer: Vec<u8>,
    /// Bytes of the current line already dropped for being too long.
    skipping: bool,
    ended: bool,
}

impl Lines {
    /// The next line (without its `\n`); `None` at the end of the body.
    /// `progress` is called whenever data arrives.
    pub fn next(
        &mut self,
        body: &mut dyn Read,
        progress: &dyn Fn(),
    ) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                if std::mem::take(&mut self.skipping) || line.len() > MAX_LINE_BYTES {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.buffer.len() > MAX_LINE_BYTES {
                self.buffer.clear();
                self.skipping = true;
            }
            if self.ended {
                if self.buffer.is_empty() || std::mem::take(&mut self.skipping) {
                    self.buffer.clear();
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.buffer)));
            }
            let mut chunk = [0u8; READ_BYTES];
            let n = match body.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                self.ended = true;
                continue;
            }
            progress();
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The end of a completion: why, and the token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub finish_reason: FinishReason,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
}

/// What one line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Blank, not JSON, or not an object: skipped.
    Skip,
    /// An object: its text piece (maybe empty) and, when it is the last,
    /// the end.
    Object { delta: String, done: Option<Done> },
}

/// Reads one line of the stream.
pub fn parse_line(line: &[u8]) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Skip;
    }
    let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(line) else {
        return Line::Skip;
    };
    let delta = object
        .get("message")
        .and_then(Value::as_object)
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let done = object.get("done").is_some_and(truthy).then(|| Done {
        finish_reason: match object.get("done_reason").and_then(Value::as_str) {
            Some("length") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            _ => FinishReason::Stop,
        },
        prompt_tokens: object.get("prompt_eval_count").and_then(Value::as_i64),
        completion_tokens: object.get("eval_count").and_then(Value::as_i64),
    });
    Line::Object { delta, done }
}

/// Python's truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_lines(body: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Lines::default();
        let mut reader = body;
        let mut out = Vec::new();
        while let Some(line) = lines.next(&mut reader, &|| {}).unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn lines_split_on_newlines_and_keep_a_last_unterminated_line() {
        assert_eq!(
            all_lines(b"a\n\nb\nc"),
            vec![b"a".to_vec(), b"".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
    }

    #[test]
    fn an_over_long_line_is_dropped_whole_and_the_next_one_kept() {
        let mut body = vec![b'x'; MAX_LINE_BYTES + 10];
        body.extend_from_slice(b"\n{\"done\":true}\n");
        let lines = all_lines(&body);
        let lengths: Vec<usize> = lines.iter().map(Vec::len).collect();
        assert!(
            lines == [b"{\"done\":true}".to_vec()],
            "line lengths {lengths:?}"
        );
    }

    #[test]
    fn pieces_come_from_message_content_strings_only() {
        let delta = |line: &str| match parse_line(line.as_bytes()) {
            Line::Object { delta, .. } => Some(delta),
            Line::Skip => None,
        };
        assert_eq!(delta(r#"{"message":{"content":"hi"}}"#), Some("hi".into()));
        assert_eq!(delta(r#"{"message":{"content":5}}"#), Some(String::new()));
        assert_eq!(delta(r#"{"message":"hi"}"#), Some(String::new()));
        assert_eq!(delta("[1,2]"), None);
        assert_eq!(delta("not json"), None);
        assert_eq!(delta("   "), None);
    }

    #[test]
    fn the_done_line_gives_the_reason_and_counts() {
        let done = |line: &str| match parse_line(line.as_bytes()) {
            Line::Object { done, .. } => done,
            Line::Skip => None,
        };
        assert_eq!(
            done(r#"{"done":true,"done_reason":"length","prompt_eval_count":3,"eval_count":4}"#),
            Some(Done {
                finish_reason: FinishReason::Length,
                prompt_tokens: Some(3),
                completion_tokens: Some(4)
            })
        );
        let unknown = done(r#"{"done":1,"done_reason":"weird"}"#).unwrap();
        assert_eq!(unknown.finish_reason, FinishReason::Stop);
        assert_eq!(unknown.prompt_tokens, None);
        assert_eq!(done(r#"{"done":false}"#), None);
        assert_eq!(done(r#"{"done":""}"#), None);
    }
}
