//! Payloads of the local LLM capability (PROTOCOL.md §7.13). Prompt and
//! response text pass through here but are never logged by this module.

use serde::Serialize;

use crate::protocol::fields::{FieldResult, Fields};
use crate::protocol::types::{ChatRole, FinishReason};

/// One chat message: exactly `{role, content}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

impl ChatMessage {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            role: f.enumeration("role")?,
            content: f.string("content")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `LOCAL_LLM_COMPLETION` (platform → shim).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalLlmCompletion {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: i64,
    pub temperature: f64,
    pub top_p: f64,
    pub stream: bool,
}

impl LocalLlmCompletion {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            model: f.string("model")?,
            messages: f.objects("messages", ChatMessage::decode)?,
            max_tokens: f.int_or("max_tokens", 1024)?,
            temperature: f.number_or("temperature", 0.0)?,
            top_p: f.number_or("top_p", 1.0)?,
            stream: f.bool_or("stream", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `LOCAL_LLM_COMPLETION_CHUNK` (shim → platform).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalLlmCompletionChunk {
    pub delta: String,
    pub finish_reason: Option<FinishReason>,
}

impl LocalLlmCompletionChunk {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            delta: f.string("delta")?,
            finish_reason: f.opt_enum("finish_reason")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// Token counts of a completion; `total` is the sum when both are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenCounts {
    pub prompt: Option<i64>,
    pub completion: Option<i64>,
    pub total: Option<i64>,
}

impl TokenCounts {
    fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            prompt: f.opt_int("prompt")?,
            completion: f.opt_int("completion")?,
            total: f.opt_int("total")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `LOCAL_LLM_COMPLETION_RESPONSE` (shim → platform, the terminal frame).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalLlmCompletionResponse {
    pub content: String,
    pub finish_reason: FinishReason,
    pub tokens: TokenCounts,
    pub duration_seconds: f64,
}

impl LocalLlmCompletionResponse {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            content: f.string("content")?,
            finish_reason: f.enumeration("finish_reason")?,
            tokens: f.object("tokens", TokenCounts::decode)?,
            duration_seconds: f.number("duration_seconds")?,
        };
        f.finish()?;
        Ok(v)
    }
}
