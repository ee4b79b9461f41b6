//! `qwengpu_chat`: a conversation with the spliced model, held by the bridge between turns
//! (one context, one KV cache, one set of DeltaNet states), its events streamed to the tab.
//!
//! The host holds one conversation at a time: SmolLM2 spliced is 590 MB of weights, and a
//! second conversation would double that. A turn naming the conversation held goes on in it;
//! another id or model ends it and starts a new one. A turn from the bridge launches suite
//! kernels and inline CUDA (compiled in the sandbox), never a file.

use super::job::{bad, Job};
use super::requests::Failure;
use crate::ebpf::models;
use crate::qwengpu::conversation::{Conversation, Reach, Sink, TurnError, Words};
use crate::qwengpu::Filter;
use kernels_wasm::protocol::qwengpu::{
    ChatDone, ChatEvent, ChatModel, ChatTurn, MAX_CHAT_STEPS, MAX_CHAT_TOKENS, MAX_CHAT_TURN,
};
use kernels_wasm::protocol::{ErrorCode, Event, FileRoot, Reply};
use kernels_wasm::qwen3::model::{Config, FloatModel, Model};
use kernels_wasm::qwengpu::splice::launch::Fed;
use kernels_wasm::qwengpu::splice::{Runner, Splice, StreamNorms, TINY_TEXT};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, TryLockError};

/// What a conversation owns: the spliced model and its tokens.
pub struct Owner {
    key: (u64, ChatModel),
    describe: String,
    config: Config,
    model: FloatModel,
    splice: Splice,
    norms: StreamNorms,
    words: Words,
}

self_cell::self_cell!(
    /// A conversation and the model it runs on.
    pub struct Session {
        owner: Owner,
        #[not_covariant]
        dependent: Conversation,
    }
);

/// The host's one conversation, and the lock a turn holds while it runs.
#[derive(Clone, Default)]
pub struct ChatSlot(Arc<Mutex<Option<Session>>>);

impl std::fmt::Debug for ChatSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatSlot")
    }
}

/// Sends a conversation's events as the request's; a cancelled request stops the turn.
struct Frames<'a>(&'a Job);

impl Sink for Frames<'_> {
    fn event(&mut self, event: ChatEvent) -> ControlFlow<()> {
        self.0.event(Event::QwengpuChat { event });
        self.fed_flow()
    }

    fn fed(&mut self, _: Fed) -> ControlFlow<()> {
        self.fed_flow()
    }
}

impl Frames<'_> {
    fn fed_flow(&self) -> ControlFlow<()> {
        if self.0.cancelled() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl Job {
    pub fn qwengpu_chat(self, t: ChatTurn, slot: ChatSlot, filter: Filter) -> Result<Reply, Failure> {
        if t.turn.trim().is_empty() || t.turn.len() > MAX_CHAT_TURN {
            return Err(bad(format!("turn: give 1 to {MAX_CHAT_TURN} bytes of text (got {})", t.turn.len())));
        }
        if t.max_tokens == 0 || t.max_tokens > MAX_CHAT_TOKENS {
            return Err(bad(format!("max_tokens {}: give 1 to {MAX_CHAT_TOKENS}", t.max_tokens)));
        }
        if t.max_steps == 0 || t.max_steps > MAX_CHAT_STEPS {
            return Err(bad(format!("max_steps {}: give 1 to {MAX_CHAT_STEPS}", t.max_steps)));
        }
        let mut held = match slot.0.try_lock() {
            Ok(held) => held,
            // A turn that panicked left its conversation half-fed: it ends.
            Err(TryLockError::Poisoned(p)) => {
                let mut held = p.into_inner();
                *held = None;
                held
            }
            Err(TryLockError::WouldBlock) => {
                return Err(Failure {
                    code: ErrorCode::Busy,
                    message: "another chat turn is running on this host".into(),
                })
            }
        };
        let key = (t.conversation, t.model.clone());
        let resumed = held.as_ref().is_some_and(|s| s.borrow_owner().key == key);
        if !resumed {
            // The old conversation's model is freed before the new one is loaded.
            *held = None;
            *held = Some(self.open(key, filter)?);
        }
        let Some(session) = held.as_mut() else {
            return Err(Failure { code: ErrorCode::Internal, message: "no conversation".into() });
        };
        let (describe, position, (layers, text_vocab, vocab)) =
            session.with_dependent(|o, c| (o.describe.clone(), c.context().len(), c.sizes()));
        self.event(Event::QwengpuChat {
            event: ChatEvent::Opened {
                model: describe,
                text_vocab: text_vocab as u32,
                vocab: vocab as u32,
                compiled_layers: layers as u32,
                resumed,
                position: position as u32,
            },
        });
        let outcome = session.with_dependent_mut(|_, c| {
            let reply = c.turn(&t.turn, t.max_tokens as usize, t.max_steps, &mut Frames(&self));
            (reply, c.context().len())
        });
        match outcome {
            (Ok(reply), position) => {
                Ok(Reply::QwengpuChatDone(ChatDone { conversation: t.conversation, position: position as u32, reply }))
            }
            (Err(TurnError::Refused(e) | TurnError::Launch(e)), _) => Err(bad(format!("{e:#}"))),
            (Err(TurnError::Stopped), _) => {
                Err(Failure { code: ErrorCode::Cancelled, message: "the turn was stopped".into() })
            }
            (Err(TurnError::Failed(e)), _) => {
                // The context may hold half a turn: the conversation ends.
                *held = None;
                Err(Failure { code: ErrorCode::Internal, message: format!("{e:#}") })
            }
        }
    }

    /// Loads and splices the conversation's model, and opens it.
    fn open(&self, key: (u64, ChatModel), filter: Filter) -> Result<Session, Failure> {
        let (config, model, words, describe) = match &key.1 {
            ChatModel::TinyRandom { seed } => (
                TINY_TEXT,
                Model::random_float(TINY_TEXT, *seed),
                Words::Bytes,
                format!("tiny random llama (seed {seed}; its text is noise, a byte a token)"),
            ),
            ChatModel::Path { path } => {
                let file = self.roots.resolve(FileRoot::Models, path)?;
                self.event(Event::Log { line: format!("loading {path}") });
                let loaded = models::load(&file, None).map_err(|e| bad(format!("{path}: {e}")))?;
                let tokenizer =
                    loaded.tokenizer.ok_or_else(|| bad(format!("{path} has no tokenizer: chat needs one")))?;
                (loaded.config, loaded.float, Words::Text(Box::new(tokenizer)), format!("{path} ({})", loaded.format))
            }
        };
        self.event(Event::Log { line: format!("splicing the second machine into {describe}") });
        let splice = Splice::new(config).map_err(|e| bad(format!("{describe}: {e}")))?;
        let norms = splice.norms(&model);
        let describe = format!("{describe} + {} compiled layers", splice.layers.len());
        let owner = Owner { key, describe, config, model, splice, norms, words };
        let reach = Reach { files: false, filter };
        Session::try_new(owner, |o| {
            let runner = Runner::spliced_with(o.config, &o.model, &o.splice, o.norms.clone())?;
            Conversation::open(runner, &o.splice, &o.words, reach)
        })
        .map_err(|e| bad(format!("{e:#}")))
    }
}
