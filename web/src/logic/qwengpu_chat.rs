//! The qwenGPU tab's conversation, folded from the bridge's `qwengpu_chat` events: each turn's
//! text, its launch's steps as the model generated them, the arrays, the DeltaNet rows decoded,
//! and the reply. No DOM here: the component draws it.

use kernels_wasm::protocol::qwengpu::{ChatEvent, ChatToken, FedPart, MachineRows, TokenKind};
use kernels_wasm::protocol::{FileRoot, ModelEntry};

/// The model choice that needs no file.
pub const TINY_LLAMA: &str = "tiny random llama";

/// One step of a launch: the host's record and the VAL tokens the model chose after it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    pub step: u32,
    pub warp: u32,
    pub block: u32,
    pub mask: u32,
    pub vals: Vec<ChatToken>,
}

/// How a launch ended.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchEnd {
    pub steps: u64,
    pub tokens: u64,
    pub chosen: u64,
    /// The record the model chose after the last step.
    pub end: ChatToken,
    pub arrays: Vec<Vec<u32>>,
    pub suite: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchView {
    pub name: String,
    pub blocks: u32,
    pub prompt: u32,
    pub steps: Vec<StepView>,
    pub end: Option<LaunchEnd>,
}

/// One turn: what the user typed, the host's tokens, the launch, the reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnView {
    pub said: String,
    /// The host's text tokens of the turn (its markup, the arrays written out, the close).
    pub fed: Vec<ChatToken>,
    pub launch: Option<LaunchView>,
    /// After a launch, the arrays as the host wrote them into the context.
    pub arrays_said: Option<String>,
    pub reply: Vec<ChatToken>,
    /// The turn's end: `Ok(())`, or the bridge's error.
    pub end: Option<Result<(), String>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatView {
    /// What the bridge loaded, and positions in the context after the last turn.
    pub model: String,
    pub position: u32,
    pub turns: Vec<TurnView>,
    /// The machine's rows after the latest launch.
    pub rows: Option<MachineRows>,
}

impl ChatView {
    /// A turn the user sent.
    pub fn begin(&mut self, said: &str) {
        self.turns.push(TurnView { said: said.into(), ..TurnView::default() });
    }

    pub fn apply(&mut self, event: &ChatEvent) {
        if let ChatEvent::Opened { model, position, resumed, .. } = event {
            (self.model, self.position) = (model.clone(), *position);
            if !resumed {
                // A new conversation: earlier turns belong to the one that ended.
                let current = self.turns.pop();
                self.turns = current.into_iter().collect();
                self.rows = None;
            }
            return;
        }
        if let ChatEvent::Rows(rows) = event {
            self.rows = Some(rows.clone());
            return;
        }
        let Some(turn) = self.turns.last_mut() else { return };
        match event {
            ChatEvent::Fed { part, text, tokens } => {
                turn.fed.extend(tokens.iter().cloned());
                if *part == FedPart::Arrays {
                    turn.arrays_said = Some(text.clone());
                }
            }
            ChatEvent::Prompt { name, blocks, tokens } => {
                turn.launch =
                    Some(LaunchView { name: name.clone(), blocks: *blocks, prompt: *tokens, ..Default::default() })
            }
            ChatEvent::Step { step, warp, block, mask, vals, .. } => {
                if let Some(l) = &mut turn.launch {
                    let s = StepView { step: *step, warp: *warp, block: *block, mask: *mask, vals: vals.clone() };
                    l.steps.push(s);
                }
            }
            ChatEvent::Launched { steps, tokens, chosen, end, arrays, suite, .. } => {
                if let Some(l) = &mut turn.launch {
                    let (arrays, end) = (arrays.clone(), end.clone());
                    l.end =
                        Some(LaunchEnd { steps: *steps, tokens: *tokens, chosen: *chosen, end, arrays, suite: *suite });
                }
            }
            ChatEvent::Reply { token } => turn.reply.push(token.clone()),
            ChatEvent::Opened { .. } | ChatEvent::Rows(_) => {}
        }
    }

    /// The turn's end: its position, or the bridge's error.
    pub fn finish(&mut self, end: Result<u32, String>) {
        if let Some(turn) = self.turns.last_mut() {
            turn.end = Some(end.as_ref().map(|_| ()).map_err(Clone::clone));
        }
        if let Ok(position) = end {
            self.position = position;
        }
    }

    pub fn running(&self) -> bool {
        self.turns.last().is_some_and(|t| t.end.is_none())
    }
}

impl TurnView {
    /// The reply as text.
    pub fn reply_text(&self) -> String {
        self.reply.iter().filter(|t| t.text != "<|im_end|>").map(|t| t.text.as_str()).collect()
    }
}

/// A step as one line: "step 3: warp 0 ran block 2 with lanes ■■□□ → VAL 7 0 …".
pub fn step_line(s: &StepView, lanes: usize) -> String {
    let mask: String = (0..lanes).map(|l| if s.mask & (1 << l) != 0 { '■' } else { '□' }).collect();
    let vals: Vec<String> = s.vals.iter().map(|v| v.text.trim_start_matches("VAL ").to_string()).collect();
    let tail = if vals.is_empty() { String::from(" (no VAL tokens)") } else { format!(" → VAL {}", vals.join(" ")) };
    format!("step {}: warp {} ran block {} with lanes {mask}{tail}", s.step, s.warp, s.block)
}

/// The CSS class of a token chip: what it is and who chose it.
pub fn token_class(t: &ChatToken) -> &'static str {
    use kernels_wasm::protocol::qwengpu::By;
    match (t.kind, t.by) {
        (TokenKind::Text, By::Host) => "tok text host",
        (TokenKind::Text, By::Model) => "tok text model",
        (TokenKind::Record, _) => "tok record",
        (TokenKind::Val, By::Model) => "tok val model",
        (TokenKind::Val, By::Host) => "tok val host",
    }
}

/// The bridge's GGUF files (SmolLM2 first), then the tiny random llama.
pub fn chat_models(entries: &[ModelEntry]) -> Vec<String> {
    let mut found: Vec<String> = entries
        .iter()
        .filter(|e| e.root == FileRoot::Models && e.path.ends_with(".gguf"))
        .map(|e| e.path.clone())
        .collect();
    found.sort_by_key(|p| (!p.to_lowercase().contains("smollm2"), p.clone()));
    found.push(TINY_LLAMA.into());
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_wasm::protocol::qwengpu::{By, RegisterRow};

    fn tok(kind: TokenKind, by: By, text: &str) -> ChatToken {
        ChatToken { id: 1, by, kind, text: text.into() }
    }

    #[test]
    fn events_fold_into_turns() {
        let mut v = ChatView::default();
        v.begin("/run reverse");
        let opened = |resumed, position| ChatEvent::Opened {
            model: "m".into(),
            text_vocab: 1000,
            vocab: 90_000,
            compiled_layers: 59,
            resumed,
            position,
        };
        v.apply(&opened(false, 0));
        v.apply(&ChatEvent::Fed {
            part: FedPart::Turn,
            text: "hi".into(),
            tokens: vec![tok(TokenKind::Text, By::Host, "hi")],
        });
        v.apply(&ChatEvent::Prompt { name: "reverse".into(), blocks: 5, tokens: 549 });
        let record = tok(TokenKind::Record, By::Model, "warp 0 block 0 lanes 1111");
        let vals = vec![tok(TokenKind::Val, By::Model, "VAL 7"), tok(TokenKind::Val, By::Model, "VAL 0")];
        v.apply(&ChatEvent::Step { step: 1, warp: 0, block: 0, mask: 0b0011, record, vals });
        v.apply(&ChatEvent::Launched {
            name: "reverse".into(),
            steps: 1,
            tokens: 553,
            chosen: 4,
            end: tok(TokenKind::Record, By::Model, "warp 5 block 0 lanes 0000"),
            arrays: vec![vec![1, 2]],
            suite: Some(true),
        });
        let rows = MachineRows {
            register_layer: 4,
            memory_layer: 9,
            pc_layer: 60,
            registers: vec![RegisterRow { warp: 0, lane: 0, values: vec![Some(3)], pc: Some(64) }],
            memory: vec![Some(1)],
        };
        v.apply(&ChatEvent::Rows(rows.clone()));
        v.apply(&ChatEvent::Fed { part: FedPart::Arrays, text: "The kernel".into(), tokens: vec![] });
        v.apply(&ChatEvent::Reply { token: tok(TokenKind::Text, By::Model, "Done") });
        v.apply(&ChatEvent::Reply { token: tok(TokenKind::Text, By::Model, "<|im_end|>") });
        assert!(v.running());
        v.finish(Ok(600));
        assert!(!v.running());
        let t = &v.turns[0];
        let l = t.launch.as_ref().unwrap();
        assert_eq!((l.prompt, l.steps.len(), l.end.as_ref().unwrap().suite), (549, 1, Some(true)));
        assert_eq!(step_line(&l.steps[0], 4), "step 1: warp 0 ran block 0 with lanes ■■□□ → VAL 7 0");
        assert_eq!((t.reply_text().as_str(), v.position, v.rows.as_ref()), ("Done", 600, Some(&rows)));
        assert_eq!(t.arrays_said.as_deref(), Some("The kernel"));

        // The next turn goes on; a new conversation drops the earlier turns and rows.
        v.begin("thanks");
        v.apply(&opened(true, 600));
        assert_eq!(v.turns.len(), 2);
        v.finish(Err("busy".into()));
        assert_eq!(v.turns[1].end, Some(Err("busy".into())));
        v.begin("hello");
        v.apply(&opened(false, 0));
        assert_eq!((v.turns.len(), v.turns[0].said.as_str(), v.rows.is_none()), (1, "hello", true));
    }

    #[test]
    fn chips_and_models() {
        assert_eq!(token_class(&tok(TokenKind::Val, By::Model, "VAL 1")), "tok val model");
        assert_eq!(token_class(&tok(TokenKind::Text, By::Host, "a")), "tok text host");
        let entry = |path: &str| ModelEntry { root: FileRoot::Models, path: path.into(), bytes: 1 };
        let models = chat_models(&[entry("a.gguf"), entry("SmolLM2.gguf"), entry("x.safetensors")]);
        assert_eq!(models, ["SmolLM2.gguf", "a.gguf", TINY_LLAMA]);
    }
}
