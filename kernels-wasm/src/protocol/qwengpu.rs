//! The messages of a conversation with the spliced model (`qwengpu_chat`,
//! `docs/qwengpu-second-machine.md` §21): a turn goes in, and out come the tokens the host fed,
//! each launch's steps as the model generates their VAL tokens, the arrays, the machine's
//! DeltaNet rows decoded, and the model's reply token by token.
//!
//! The bridge holds one conversation at a time. A request naming the conversation it holds goes
//! on in that context; any other id (or another model) starts a new one, and the old one ends.

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Who put a token into the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// The host: the turns' text, a launch's prompt and its records.
    Host,
    /// The model's own argmax.
    Model,
}

/// Longest turn, in bytes (inline CUDA included).
pub const MAX_CHAT_TURN: usize = 16 * 1024;
/// Most tokens one reply may take.
pub const MAX_CHAT_TOKENS: u32 = 512;
/// Most machine steps one launch may take.
pub const MAX_CHAT_STEPS: u64 = 100_000;

/// The text model the machine is spliced into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ChatModel {
    /// A tiny llama with SmolLM2's hidden size and deterministic random weights, its text a byte
    /// per token: needs no download, and writes noise as text, but its machine is the same.
    TinyRandom { seed: u64 },
    /// A llama GGUF under the bridge's models directory (SmolLM2-135M-Instruct).
    Path { path: String },
}

/// One turn: text, `/run NAME` (a suite kernel), or `/cuda --block B [--grid G] --arg …` and the
/// CUDA source on the lines after it. Files are the CLI's: the bridge reads none for a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub conversation: u64,
    pub model: ChatModel,
    pub turn: String,
    pub max_tokens: u32,
    pub max_steps: u64,
}

/// What a token of the context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    Text,
    /// "warp w ran block b with lanes m" (a prompt's records too).
    Record,
    /// A 16-bit value: an image word, an input, a register half, a store's address or word.
    Val,
}

/// A token of the context, as the tab shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatToken {
    pub id: u32,
    pub by: By,
    pub kind: TokenKind,
    /// The text piece (a text token), or the machine token written out.
    pub text: String,
}

/// One warp's lane as the register file's rows hold it: each register's word, `None` where a
/// half's row is not an exact limb row. Registers never written read 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterRow {
    pub warp: u32,
    pub lane: u32,
    pub values: Vec<Option<u32>>,
    /// The lane's PC as the PC rows hold it: the block it runs next, 64 once it has exited.
    pub pc: Option<u32>,
}

/// The machine's state rows after a launch, decoded from the spliced model's DeltaNet layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRows {
    /// Which compiled layers hold them (indices among the splice's layers).
    pub register_layer: u32,
    pub memory_layer: u32,
    /// The PC rows, from which the model reads each next record.
    pub pc_layer: u32,
    pub registers: Vec<RegisterRow>,
    /// Global memory's words as a load mixer holds them.
    pub memory: Vec<Option<u32>>,
}

/// Which of the host's texts a [`ChatEvent::Fed`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FedPart {
    /// The model's default system turn, at the conversation's start.
    System,
    /// The user's turn in its ChatML markup, and the assistant's opening.
    Turn,
    /// After a launch: the arrays the model's VAL tokens carried, written out as text.
    Arrays,
    /// The end of the assistant's turn.
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum ChatEvent {
    /// The conversation this turn goes on in.
    Opened {
        model: String,
        /// Text tokens, then machine tokens.
        text_vocab: u32,
        vocab: u32,
        compiled_layers: u32,
        /// Whether it went on from an earlier turn (else it is new).
        resumed: bool,
        /// Positions in its context before this turn.
        position: u32,
    },
    /// Text the host fed.
    Fed {
        part: FedPart,
        text: String,
        tokens: Vec<ChatToken>,
    },
    /// A launch begins: its prompt (the reset record, image, launch words and memory) was fed.
    Prompt {
        name: String,
        blocks: u32,
        tokens: u32,
    },
    /// One machine step: the record the host fed, and the VAL tokens the model then chose.
    Step {
        step: u32,
        warp: u32,
        block: u32,
        mask: u32,
        record: ChatToken,
        vals: Vec<ChatToken>,
    },
    /// A launch ended: the arrays as the model's tokens carried them; `suite` tells whether they
    /// are the suite's plain Rust arrays (for a suite kernel). `end` is the record the model
    /// chose after the last step (`next_record::END`), the launch's last token.
    Launched {
        name: String,
        steps: u64,
        tokens: u64,
        chosen: u64,
        end: ChatToken,
        arrays: Vec<Vec<u32>>,
        suite: Option<bool>,
    },
    Rows(MachineRows),
    /// One token of the model's reply, chosen by its argmax.
    Reply {
        token: ChatToken,
    },
}

/// The turn's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatDone {
    pub conversation: u64,
    /// Positions in the context after the turn.
    pub position: u32,
    pub reply: String,
}
