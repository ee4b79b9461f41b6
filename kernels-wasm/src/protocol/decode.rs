//! Decoding frames with errors that say what was wrong: not JSON, an unknown `type`/`op`, or a
//! known message with bad fields. Both sides decode through here.

use super::{ClientMessage, ErrorCode, ServerMessage, MAX_FRAME_BYTES};
use alloc::format;
use alloc::string::{String, ToString};
use serde::de::DeserializeOwned;
use serde_json::Value;

const CLIENT_TYPES: &[&str] = &["hello", "request", "cancel"];
const SERVER_TYPES: &[&str] = &["hello", "event", "result", "error"];
const REQUEST_OPS: &[&str] =
    &["ping", "probe", "list_models", "model_info", "ebpf_run", "qwengpu_compile", "qwengpu_chat", "esp32_run"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {bytes} bytes exceeds the {limit}-byte limit")]
    TooLarge { bytes: usize, limit: usize },
    #[error("frame is not valid JSON: {0}")]
    BadJson(String),
    #[error("frame is not a JSON object with a string \"type\" field")]
    NoType,
    #[error("unknown message type {found:?} (expected one of {expected})")]
    UnknownType { found: String, expected: String },
    #[error("unknown request op {found:?} (expected one of {expected})")]
    UnknownOp { found: String, expected: String },
    #[error("bad fields in {kind:?} message: {detail}")]
    BadFields { kind: String, detail: String },
}

impl DecodeError {
    /// The protocol error code a peer reports for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::TooLarge { .. } => ErrorCode::FrameTooLarge,
            DecodeError::BadJson(_) => ErrorCode::BadJson,
            DecodeError::NoType | DecodeError::UnknownType { .. } | DecodeError::UnknownOp { .. } => {
                ErrorCode::UnknownType
            }
            DecodeError::BadFields { .. } => ErrorCode::BadFields,
        }
    }
}

impl ClientMessage {
    pub fn from_json(text: &str) -> Result<Self, DecodeError> {
        let value = parse(text)?;
        let kind = message_type(&value, CLIENT_TYPES)?;
        if kind == "request" {
            if let Some(op) = value.get("request").and_then(|r| r.get("op")).and_then(Value::as_str) {
                if !REQUEST_OPS.contains(&op) {
                    return Err(DecodeError::UnknownOp { found: op.to_string(), expected: REQUEST_OPS.join(", ") });
                }
            }
        }
        fields(value, &kind)
    }
}

impl ServerMessage {
    pub fn from_json(text: &str) -> Result<Self, DecodeError> {
        let value = parse(text)?;
        let kind = message_type(&value, SERVER_TYPES)?;
        fields(value, &kind)
    }
}

fn parse(text: &str) -> Result<Value, DecodeError> {
    if text.len() > MAX_FRAME_BYTES {
        return Err(DecodeError::TooLarge { bytes: text.len(), limit: MAX_FRAME_BYTES });
    }
    serde_json::from_str(text).map_err(|e| DecodeError::BadJson(e.to_string()))
}

fn message_type(value: &Value, known: &[&str]) -> Result<String, DecodeError> {
    let kind = value.get("type").and_then(Value::as_str).ok_or(DecodeError::NoType)?;
    if known.contains(&kind) {
        Ok(kind.to_string())
    } else {
        Err(DecodeError::UnknownType { found: kind.to_string(), expected: known.join(", ") })
    }
}

fn fields<T: DeserializeOwned>(value: Value, kind: &str) -> Result<T, DecodeError> {
    serde_json::from_value(value).map_err(|e| DecodeError::BadFields { kind: kind.to_string(), detail: format!("{e}") })
}
