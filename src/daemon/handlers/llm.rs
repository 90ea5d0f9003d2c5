//! `LOCAL_LLM_COMPLETION` on a data connection (CAPABILITIES.md §5.2): the
//! local LLM runs the completion and says what happened; here its failure
//! gets its wire code, message and `details`, and the completion its one
//! audit record.

use std::time::Instant;

use serde_json::{Map, json};

use super::{Handled, audit_result, millis, not_granted, operation_entry};
use crate::daemon::features::ConnectionLlm;
use crate::llm::{ChunkSink, LlmError};
use crate::protocol::{ErrorCode, ErrorPayload, LocalLlmCompletion, Message, MessageType};

/// How much of a backend error the message quotes.
const MESSAGE_QUOTE_CHARS: usize = 200;

/// Runs one completion; chunks go to `sink`.
pub fn handle(
    llm: &ConnectionLlm,
    request_id: &str,
    req: &LocalLlmCompletion,
    granted: &[String],
    sink: &mut dyn ChunkSink,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Handled {
    let started = Instant::now();
    let outcome = llm.llm.complete(&llm.models, req, sink, cancelled);
    let error_code = outcome.reply.as_ref().err().map(code);
    let audit = operation_entry(
        MessageType::LocalLlmCompletion,
        request_id,
        outcome.details,
        audit_result(error_code, None, millis(started)),
    );
    let reply = match outcome.reply {
        Ok(response) => Message::LocalLlmCompletionResponse(response),
        Err(LlmError::Disabled) => not_granted("local_llm", granted),
        Err(error) => Message::Error(payload(error)),
    };
    Handled {
        reply: Some(reply),
        audit: Some(audit),
        leftover_group: None,
        settle: None,
    }
}

fn code(error: &LlmError) -> ErrorCode {
    match error {
        LlmError::Disabled => ErrorCode::CapabilityNotGranted,
        LlmError::NotAdvertised { .. } | LlmError::ModelNotAvailable { .. } => {
            ErrorCode::ModelNotAvailable
        }
        LlmError::Busy => ErrorCode::LocalLlmBusy,
        LlmError::Failed { .. } => ErrorCode::LocalLlmFailed,
    }
}

fn payload(error: LlmError) -> ErrorPayload {
    let code = code(&error);
    let mut details = Map::new();
    let message = match error {
        LlmError::Disabled => "Local LLM is not enabled on this shim.".to_owned(),
        LlmError::NotAdvertised {
            requested,
            available,
        } => {
            let message = format!("Model '{requested}' not in advertised list.");
            details.insert("requested_model".into(), json!(requested));
            details.insert("available_models".into(), json!(available));
            message
        }
        LlmError::Busy => "Local LLM backend is already processing another request.".to_owned(),
        LlmError::ModelNotAvailable { backend_error } => {
            details.insert("backend_error".into(), json!(backend_error));
            "Requested local LLM model is not loaded on the shim.".to_owned()
        }
        LlmError::Failed { backend_error } => {
            let quoted: String = backend_error.chars().take(MESSAGE_QUOTE_CHARS).collect();
            details.insert("backend_error".into(), json!(backend_error));
            format!("Local LLM backend failed: {quoted}")
        }
    };
    let payload = ErrorPayload::new(code, message);
    if details.is_empty() {
        payload
    } else {
        payload.with_details(details)
    }
}
