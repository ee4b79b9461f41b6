//! The websocket protocol between the playground (`web`) and the bridge (`native-host`).
//!
//! JSON text frames, one message per frame. The conversation:
//!
//! 1. server → [`ServerMessage::Hello`]: protocol version, host version, capabilities, limits;
//! 2. client → [`ClientMessage::Hello`] with the protocol version it speaks (a mismatch gets an
//!    [`ErrorCode::ProtocolVersion`] error and a close);
//! 3. client → [`ClientMessage::Request`] `{id, request}` any number of times, at most
//!    [`MAX_IN_FLIGHT`] unanswered at once;
//! 4. server → zero or more [`ServerMessage::Event`] `{id, event}` for that id, then exactly one
//!    [`ServerMessage::Result`] or one [`ServerMessage::Error`] carrying the same id.
//!
//! Errors that belong to no request (malformed JSON, an unknown message type) carry `id: null`.
//! The session token and the Origin are checked on the HTTP upgrade, before any frame.

mod decode;
pub mod ebpf;
pub mod esp32;
pub mod qwengpu;

pub use decode::DecodeError;

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Bumped on every incompatible change to the messages below.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame either side accepts. Bigger ones close the connection with code 1009.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Requests a connection may have unanswered at once; more get [`ErrorCode::Busy`].
pub const MAX_IN_FLIGHT: usize = 16;
/// Longest artificial delay a [`Request::Ping`] may ask for.
pub const MAX_PING_DELAY_MS: u32 = 5_000;
/// The websocket path on the bridge (and on the playground's dev server, which proxies it).
pub const WS_PATH: &str = "/ws";
/// Query parameter that carries the session token on the upgrade request.
pub const TOKEN_PARAM: &str = "token";

/// Client-chosen request id, echoed on every event, result and error of that request.
pub type RequestId = u64;

/// Messages the playground sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// The client's half of the handshake; must be the first frame.
    Hello { protocol: u32, client: String },
    /// Start a request.
    Request { id: RequestId, request: Request },
    /// Stop a running request; it ends with [`ErrorCode::Cancelled`].
    Cancel { id: RequestId },
}

/// The operations the bridge offers. Later substrates add theirs here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Round trip; `delay_ms` (≤ [`MAX_PING_DELAY_MS`]) holds the reply back, to measure and to
    /// exercise the in-flight limit.
    Ping {
        nonce: u64,
        #[serde(default)]
        delay_ms: u32,
    },
    /// Run the capability probes again, streaming one event per probe.
    Probe,
    /// Files under the models directory and `assets/`.
    ListModels,
    /// Size and detected format of one file under a root.
    ModelInfo {
        root: FileRoot,
        path: String,
    },
    /// Greedy generation with every Qwen3 operator in BPF programs in the host's kernel: events
    /// [`Event::EbpfVerifier`], then per position [`Event::EbpfToken`] and [`Event::EbpfTrace`];
    /// reply [`Reply::EbpfDone`]. One run at a time per host (the kernel maps are shared).
    EbpfRun {
        model: ebpf::EbpfModel,
        prompt: ebpf::EbpfPrompt,
        max_tokens: u32,
        /// Threads sharing each matrix (1 or 2).
        #[serde(default = "two")]
        threads: u32,
    },
    /// CUDA C → PTX with the host's clang-19 (the qwenGPU tab's CUDA editor); reply
    /// [`Reply::QwengpuPtx`]. The source may include only `qwengpu.h` and is at most
    /// [`MAX_CUDA_BYTES`].
    QwengpuCompile {
        cuda: String,
    },
    QwengpuChat(qwengpu::ChatTurn),
    /// BitNet blocks split across emulated ESP32-S3 nodes the bridge starts: events
    /// [`Event::Esp32`] (the plan, each load, every pipeline step, the tokens); reply
    /// [`Reply::Esp32Done`]. One run at a time per host.
    Esp32Run(esp32::Esp32Run),
}

/// Largest CUDA source [`Request::QwengpuCompile`] takes.
pub const MAX_CUDA_BYTES: usize = 64 * 1024;

fn two() -> u32 {
    2
}

/// The directories the bridge may read. Nothing outside them is ever opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRoot {
    /// `native-host serve --models-dir DIR`.
    Models,
    /// The repository's `assets/` folder (small data, kernel sources).
    Assets,
}

/// Messages the bridge sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Hello(HostHello),
    Event { id: RequestId, event: Event },
    Result { id: RequestId, result: Reply },
    Error(ErrorFrame),
}

/// First frame of every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostHello {
    pub protocol: u32,
    pub host_version: String,
    pub capabilities: Capabilities,
    pub limits: Limits,
}

/// What this host can do. Each probe says why when it fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// A trivial socket-filter program was loaded with `bpf(BPF_PROG_LOAD)`.
    pub ebpf: ProbeResult,
    /// `clang-19` runs (it compiles BPF C and CUDA → PTX).
    pub clang: ProbeResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub available: bool,
    /// What was found ("clang version 19.1.7") or what is missing ("bpf(): EPERM — needs CAP_BPF").
    pub detail: String,
}

/// Limits the client must respect; announced so the page can show and enforce them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_frame_bytes: u64,
    pub max_in_flight: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_frame_bytes: MAX_FRAME_BYTES as u64, max_in_flight: MAX_IN_FLIGHT as u32 }
    }
}

/// Streamed before a request's final reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Progress {
        step: String,
        done: u32,
        total: u32,
    },
    Probe {
        name: String,
        result: ProbeResult,
    },
    Log {
        line: String,
    },
    EbpfVerifier {
        programs: Vec<ebpf::VerifierStat>,
    },
    /// The model that was loaded and the prompt as token ids with their text.
    EbpfPrompt {
        /// "GGUF llama: 30 layers, hidden 576, vocab 49152", …
        model: String,
        ids: Vec<u32>,
        /// Each id's text (empty without a tokenizer).
        pieces: Vec<String>,
    },
    /// The token chosen at `pos` (for prompt positions: the prediction the prompt overrides).
    EbpfToken {
        pos: u32,
        token: u32,
        prompt: bool,
        /// The kernel's five largest logits.
        top: Vec<ebpf::TopLogit>,
        /// The f32 reference forward pass's five largest, for comparison.
        reference_top: Vec<ebpf::TopLogit>,
        seconds: f64,
        calls: u32,
        /// The token's text (empty without a tokenizer).
        #[serde(default)]
        text: String,
    },
    EbpfTrace {
        pos: u32,
        spans: Vec<ebpf::TraceSpan>,
    },
    Esp32 {
        event: esp32::Esp32Event,
    },
    QwengpuChat {
        event: qwengpu::ChatEvent,
    },
}

/// The final, successful answer to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Pong { nonce: u64 },
    Capabilities(Capabilities),
    Models { models: Vec<ModelEntry> },
    ModelInfo(ModelInfo),
    EbpfDone { generated: Vec<u32>, seconds_per_token: f64, calls_per_token: f64 },
    QwengpuPtx { ptx: String },
    Esp32Done(esp32::Esp32Summary),
    QwengpuChatDone(qwengpu::ChatDone),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelEntry {
    pub root: FileRoot,
    /// Relative to the root, `/`-separated.
    pub path: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub root: FileRoot,
    pub path: String,
    pub bytes: u64,
    pub format: FileFormat,
}

/// Recognised from the first bytes of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// Starts with `GGUF` and a little-endian version.
    Gguf {
        version: u32,
    },
    /// An 8-byte little-endian header length followed by a JSON header.
    Safetensors,
    Unknown,
}

impl FileFormat {
    /// Detect the format from a file's first bytes (at least 16 should be given when available).
    pub fn sniff(head: &[u8]) -> FileFormat {
        if head.len() >= 8 && &head[..4] == b"GGUF" {
            let version = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            return FileFormat::Gguf { version };
        }
        if head.len() >= 9 {
            let mut len = [0u8; 8];
            len.copy_from_slice(&head[..8]);
            // A safetensors header is JSON that opens with '{' and is far below 100 MB.
            if u64::from_le_bytes(len) < 100_000_000 && head[8] == b'{' {
                return FileFormat::Safetensors;
            }
        }
        FileFormat::Unknown
    }
}

/// A failure: of one request (`id` set) or of a frame that could not be read as one (`id` null).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFrame {
    pub id: Option<RequestId>,
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame is not JSON.
    BadJson,
    /// A binary frame; the protocol is JSON text.
    BadFrame,
    /// `type` (or a request's `op`) names no known message.
    UnknownType,
    /// The message is known but its fields are wrong.
    BadFields,
    /// The client hello named another protocol version.
    ProtocolVersion,
    /// A request arrived before the client hello.
    HelloRequired,
    /// Larger than [`MAX_FRAME_BYTES`].
    FrameTooLarge,
    /// [`MAX_IN_FLIGHT`] requests are already running.
    Busy,
    /// That id is already running.
    DuplicateId,
    /// A parameter is out of range.
    BadRequest,
    /// The path leaves the permitted directories.
    PathRefused,
    NotFound,
    Io,
    Cancelled,
    Internal,
}

/// Websocket close codes the bridge uses (RFC 6455 §7.4.1).
pub mod close_code {
    pub const NORMAL: u16 = 1000;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    pub const INTERNAL_ERROR: u16 = 1011;
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

impl ClientMessage {
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

impl ServerMessage {
    pub fn to_json(&self) -> String {
        to_json(self)
    }

    pub fn error(id: Option<RequestId>, code: ErrorCode, message: impl Into<String>) -> Self {
        ServerMessage::Error(ErrorFrame { id, code, message: message.into() })
    }
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Serialising these types cannot fail: every map key is a string and no Serialize impl errors.
    serde_json::to_string(value).unwrap_or_else(|e| alloc::format!("{{\"serialize_error\":\"{e}\"}}"))
}

#[cfg(test)]
mod tests;
