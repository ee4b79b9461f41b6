//! A conversation's turns, for `qwengpu chat` and for the bridge's `qwengpu_chat`
//! (docs/qwengpu-second-machine.md §20–21): ChatML as SmolLM2-Instruct was trained on it, a
//! kernel launched from a turn, and everything that happens told to a [`Sink`] as the
//! [`ChatEvent`]s the tab shows.
//!
//! A turn is a line of text, or a kernel launch:
//! - `/run NAME`: a suite kernel with its own launch and inputs;
//! - `/run FILE.cu|FILE.ptx --block B [--grid G] --arg …`: any kernel, as `qwengpu run` takes
//!   it (the CLI only: the bridge reads no file for a turn);
//! - `/cuda --block B [--grid G] --arg …`, then the CUDA source on the lines after it
//!   (compiled by clang-19 in the bridge's sandbox).
//!
//! A launch is the assistant's turn: the host feeds the program image and the inputs, the
//! model's argmax picks every record and VAL token (and the launch's end), the host writes the
//! arrays those tokens carried into the reply as text, and the model goes on from there until
//! `<|im_end|>`.

use super::run::lay_out;
use super::{read_ptx, source::cuda_source_to_ptx, Filter};
use crate::ebpf::tokenize::TextTokenizer;
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use kernels_wasm::protocol::qwengpu::{ChatEvent, ChatToken, FedPart, TokenKind};
use kernels_wasm::qwengpu::args::Layout;
use kernels_wasm::qwengpu::isa::{MachineSpec, Program};
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::next_record::END;
use kernels_wasm::qwengpu::splice::chat::{By, Chat};
use kernels_wasm::qwengpu::splice::launch::{Fed, LaunchError};
use kernels_wasm::qwengpu::splice::{chat::ChatError, Runner, Splice};
use kernels_wasm::qwengpu::suite;
use std::ops::ControlFlow;
use std::path::PathBuf;

/// The text side's tokens: the model's tokenizer, or (for the tiny random llama, which has
/// none) a byte per token with ChatML's two markers after the bytes.
pub enum Words {
    Text(Box<TextTokenizer>),
    Bytes,
}

const BYTE_MARKERS: [&str; 2] = ["<|im_start|>", "<|im_end|>"];

impl Words {
    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        let Words::Text(t) = self else {
            let mut ids = Vec::new();
            let mut rest = text;
            while !rest.is_empty() {
                let next = BYTE_MARKERS.iter().enumerate().filter_map(|(i, m)| rest.find(m).map(|at| (at, i))).min();
                let (at, marker) = next.map_or((rest.len(), None), |(at, i)| (at, Some(i)));
                ids.extend(rest[..at].bytes().map(usize::from));
                rest = &rest[at..];
                if let Some(i) = marker {
                    ids.push(256 + i);
                    rest = &rest[BYTE_MARKERS[i].len()..];
                }
            }
            return Ok(ids);
        };
        Ok(t.encode(text)?)
    }

    /// Text for `ids` (a byte model's invalid UTF-8 replaced).
    pub fn decode(&self, ids: &[usize]) -> Result<String> {
        let Words::Text(t) = self else {
            let mut bytes = Vec::new();
            for &id in ids {
                match id {
                    0..=255 => bytes.push(id as u8),
                    256 | 257 => bytes.extend(BYTE_MARKERS[id - 256].bytes()),
                    _ => bytes.extend(format!("<{id}>").bytes()),
                }
            }
            return Ok(String::from_utf8_lossy(&bytes).into_owned());
        };
        Ok(t.decode(ids)?)
    }

    /// The single id of a marker such as `<|im_end|>`.
    fn marker(&self, text: &str) -> Result<usize> {
        match self.encode(text)?.as_slice() {
            [id] => Ok(*id),
            _ => bail!("the tokenizer has no {text} token: chat needs a ChatML model (SmolLM2-Instruct)"),
        }
    }

    fn default_system(&self) -> Option<&str> {
        match self {
            Words::Text(t) => t.default_system.as_deref(),
            Words::Bytes => None,
        }
    }
}

/// Where a conversation's events go; a [`ControlFlow::Break`] ends the turn at the next step or
/// token (the bridge's cancellation).
pub trait Sink {
    fn event(&mut self, event: ChatEvent) -> ControlFlow<()>;
    /// Every token a launch feeds, for a progress line.
    fn fed(&mut self, _: Fed) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Why a turn did not end in a reply.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The turn's kernel cannot be launched (named); nothing was fed.
    #[error("{0:#}")]
    Refused(anyhow::Error),
    /// The launch failed (its step limit, a token that is not the interpreter's); the turn was
    /// closed in the context.
    #[error("{0:#}")]
    Launch(anyhow::Error),
    /// The sink asked to stop; the turn was closed in the context.
    #[error("stopped, as asked")]
    Stopped,
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

/// A kernel a turn asked for, laid out for launching.
struct Ready {
    name: String,
    program: Program,
    layout: Layout,
    /// The suite's plain Rust arrays, for a suite kernel.
    expected: Option<Vec<Vec<u32>>>,
}

/// A launch line's options, as `qwengpu run` takes them.
#[derive(Parser)]
#[command(name = "/run", no_binary_name = false, disable_help_flag = true)]
struct LaunchLine {
    /// A suite kernel's name or a .cu/.ptx file (none for /cuda).
    target: Option<String>,
    #[arg(long, default_value_t = 1)]
    grid: usize,
    #[arg(long)]
    block: Option<usize>,
    #[arg(long = "arg", allow_hyphen_values = true)]
    args: Vec<String>,
    #[arg(long)]
    kernel: Option<String>,
}

/// What a conversation may reach outside its context.
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// Whether `/run FILE` may read a file (the CLI's, not the bridge's).
    pub files: bool,
    /// The include filter of the sandboxed clang.
    pub filter: Filter,
}

/// A turn's kernel, compiled and laid out; `None` for a text turn.
fn kernel_of(turn: &str, spec: &MachineSpec, reach: Reach) -> Result<Option<Ready>> {
    let (first, source) = turn.split_once('\n').unwrap_or((turn, ""));
    let words: Vec<&str> = first.split_whitespace().collect();
    let (cuda, rest) = match words.split_first() {
        Some((&"/run", rest)) => (false, rest),
        Some((&"/cuda", rest)) => (true, rest),
        _ => return Ok(None),
    };
    let line = LaunchLine::try_parse_from(std::iter::once(words[0]).chain(rest.iter().copied()))
        .map_err(|e| anyhow!("{}", e.render().to_string().trim_end()))?;
    if cuda {
        if line.target.is_some() {
            bail!("/cuda takes the source on the lines after it (up to /end), not {:?}", line.target);
        }
        let ptx = cuda_source_to_ptx(source, reach.filter)?;
        return from_ptx(&ptx, "inline CUDA", &line, spec).map(Some);
    }
    let target = line.target.as_deref().ok_or_else(|| anyhow!("/run needs a suite kernel's name or a file"))?;
    if let Some(k) = suite::kernels().into_iter().find(|k| k.name == target) {
        if line.block.is_some() || !line.args.is_empty() {
            bail!("{target} is a suite kernel: it brings its own launch and inputs (give a file to choose them)");
        }
        let (kernel, p, _) = k.machine(k.ptx, spec).map_err(|e| anyhow!("{target}: {e}"))?;
        let expected = Some(k.expected(&p));
        let arrays = p.offsets.iter().zip(&p.arrays).map(|(&o, a)| (o, a.len())).collect();
        let layout = Layout { memory: p.memory, launch: p.launch, arrays };
        return Ok(Some(Ready { name: target.into(), program: kernel.program, layout, expected }));
    }
    let names: Vec<&str> = suite::kernels().iter().map(|k| k.name).collect();
    if !reach.files {
        bail!("{target:?} is not a suite kernel ({}); here a kernel is a suite name or /cuda source", names.join(", "));
    }
    let path = PathBuf::from(target);
    if !path.is_file() {
        bail!("{target:?} is neither a file nor a suite kernel ({})", names.join(", "));
    }
    from_ptx(&read_ptx(&path)?, target, &line, spec).map(Some)
}

fn from_ptx(ptx: &str, what: &str, line: &LaunchLine, spec: &MachineSpec) -> Result<Ready> {
    let block = line.block.ok_or_else(|| anyhow!("{what}: give --block (threads per block)"))?;
    let (kernel, _, layout) = lay_out(ptx, what, line.kernel.as_deref(), (line.grid, block), &line.args, spec)?;
    Ok(Ready { name: kernel.name, program: kernel.program, layout, expected: None })
}

/// A stretch of text the model generated: `[start, end)` in the context, and whether a launch
/// came before it in its turn.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub start: usize,
    pub end: usize,
    pub after_launch: bool,
}

/// A conversation with the spliced model.
pub struct Conversation<'a> {
    chat: Chat<'a>,
    words: &'a Words,
    im_end: usize,
    spec: MachineSpec,
    reach: Reach,
    pub replies: Vec<Reply>,
}

impl<'a> Conversation<'a> {
    /// A conversation in `runner`, opened with the model's default system turn (SmolLM2's).
    pub fn open(runner: Runner<'a>, splice: &'a Splice, words: &'a Words, reach: Reach) -> Result<Self> {
        words.marker("<|im_start|>")?;
        let im_end = words.marker("<|im_end|>")?;
        let chat = Chat::new(runner, splice);
        let mut c = Conversation { chat, words, im_end, spec: MachineSpec::second(), reach, replies: Vec::new() };
        if let Some(system) = words.default_system() {
            c.chat.feed(&words.encode(&format!("<|im_start|>system\n{system}<|im_end|>\n"))?)?;
        }
        Ok(c)
    }

    pub fn context(&self) -> &[(usize, By)] {
        &self.chat.context
    }

    /// The compiled layers, the text vocabulary and the whole one.
    pub fn sizes(&self) -> (usize, usize, usize) {
        self.chat.sizes()
    }

    /// A context token as the tab shows it.
    pub fn token(&self, id: usize, by: By) -> ChatToken {
        match self.chat.splice().machine_token(id) {
            None => ChatToken {
                id: id as u32,
                by,
                kind: TokenKind::Text,
                text: self.words.decode(&[id]).unwrap_or_default(),
            },
            Some(t) => machine_token(self.chat.splice(), t, by),
        }
    }

    /// Feeds the host's `text`, telling the sink.
    fn say(&mut self, part: FedPart, text: &str, sink: &mut dyn Sink) -> Result<ControlFlow<()>> {
        let ids = self.words.encode(text)?;
        self.chat.feed(&ids)?;
        let tokens = ids.iter().map(|&id| self.token(id, By::Host)).collect();
        Ok(sink.event(ChatEvent::Fed { part, text: text.into(), tokens }))
    }

    /// One turn, to the end of the model's reply (at most `max_tokens` tokens, a launch at most
    /// `max_steps` steps); the reply's text.
    pub fn turn(
        &mut self,
        turn: &str,
        max_tokens: usize,
        max_steps: u64,
        sink: &mut dyn Sink,
    ) -> Result<String, TurnError> {
        let ready = kernel_of(turn, &self.spec, self.reach).map_err(TurnError::Refused)?;
        let user = format!("<|im_start|>user\n{turn}<|im_end|>\n<|im_start|>assistant\n");
        let mut flow = self.say(FedPart::Turn, &user, sink)?;
        if let (Some(r), true) = (&ready, flow.is_continue()) {
            match self.launch(r, max_steps, sink) {
                Ok(said) => flow = self.say(FedPart::Arrays, &said, sink)?,
                Err(e) => {
                    let _ = self.say(FedPart::Close, "<|im_end|>\n", sink)?;
                    return Err(match e.downcast_ref::<ChatError>() {
                        Some(ChatError::Launch(LaunchError::Stopped { .. })) => TurnError::Stopped,
                        _ => TurnError::Launch(e.context(format!("running {} inside the spliced model", r.name))),
                    });
                }
            }
        }
        let start = self.chat.context.len();
        let mut generated = Vec::new();
        if flow.is_continue() {
            let (words, splice, im_end) = (self.words, self.chat.splice(), self.im_end);
            generated = self
                .chat
                .generate(max_tokens, &[im_end], |id| {
                    let token = match splice.machine_token(id) {
                        None => ChatToken {
                            id: id as u32,
                            by: By::Model,
                            kind: TokenKind::Text,
                            text: words.decode(&[id]).unwrap_or_default(),
                        },
                        Some(t) => machine_token(splice, t, By::Model),
                    };
                    flow = sink.event(ChatEvent::Reply { token });
                    flow
                })
                .map_err(anyhow::Error::from)?;
        }
        self.replies.push(Reply { start, end: self.chat.context.len(), after_launch: ready.is_some() });
        let close = if generated.last() == Some(&self.im_end) { "\n" } else { "<|im_end|>\n" };
        let _ = self.say(FedPart::Close, close, sink)?;
        if flow.is_break() {
            return Err(TurnError::Stopped);
        }
        let text: Vec<usize> = generated.into_iter().filter(|&id| id != self.im_end).collect();
        Ok(self.words.decode(&text)?)
    }

    /// One launch, its steps told to the sink as they are generated; what the host then writes
    /// into the reply: the arrays as the model's VAL tokens carried them.
    fn launch(&mut self, r: &Ready, max_steps: u64, sink: &mut dyn Sink) -> Result<String> {
        let spec = self.spec;
        let mut step: Option<(u32, [u32; 3], ChatToken, Vec<ChatToken>)> = None;
        let mut prompt = 0u32;
        let splice = self.chat.splice();
        let view = |t: Token, by: By| machine_token(splice, t, by);
        let blocks = r.program.blocks.len() as u32;
        let name = r.name.clone();
        let out = self.chat.launch((spec, &r.program), &r.layout.memory, &r.layout.launch, max_steps, |f| {
            let mut flow = sink.fed(f);
            if f.steps == 0 {
                prompt += 1;
                return flow;
            }
            let (warp, block, mask) = match f.token {
                Token::Val(_) => {
                    if let Some((_, _, _, vals)) = &mut step {
                        vals.push(view(f.token, By::Model));
                    }
                    return flow;
                }
                // The model's record after the last step ends the launch.
                t if t == END => return flow,
                Token::Record { warp, block, mask } => (warp, block, mask),
            };
            if f.steps == 1 {
                flow = both(flow, sink.event(ChatEvent::Prompt { name: name.clone(), blocks, tokens: prompt }));
            }
            if let Some((n, [warp, block, mask], record, vals)) = step.take() {
                flow = both(flow, sink.event(ChatEvent::Step { step: n, warp, block, mask, record, vals }));
            }
            step = Some((f.steps as u32, [warp, block, mask], view(f.token, By::Model), Vec::new()));
            flow
        });
        let out = out?;
        if let Some((n, [warp, block, mask], record, vals)) = step.take() {
            let _ = sink.event(ChatEvent::Step { step: n, warp, block, mask, record, vals });
        }
        let arrays = r.layout.read_arrays(&out.global);
        let suite = r.expected.as_ref().map(|e| *e == arrays);
        let _ = sink.event(ChatEvent::Launched {
            name: r.name.clone(),
            steps: out.steps,
            tokens: out.tokens,
            chosen: out.chosen,
            end: view(END, By::Model),
            arrays: arrays.clone(),
            suite,
        });
        let launch = &r.layout.launch;
        let per_cta = launch.block.div_ceil(spec.lanes);
        if let Some(rows) = self.chat.rows((launch.grid * per_cta, per_cta), spec.regs, out.global.len()) {
            let _ = sink.event(ChatEvent::Rows(rows));
        }
        let listed: Vec<String> = arrays
            .iter()
            .enumerate()
            .map(|(i, a)| {
                format!("array {} = [{}]", i + 1, a.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
            })
            .collect();
        Ok(format!("The kernel {} ran in {} steps and left {}.", r.name, out.steps, listed.join(" and ")))
    }
}

/// A machine token as the tab shows it.
fn machine_token(splice: &Splice, t: Token, by: By) -> ChatToken {
    let (kind, text) = match t {
        Token::Val(v) => (TokenKind::Val, format!("VAL {v}")),
        Token::Record { warp, block, mask } => {
            (TokenKind::Record, format!("warp {warp} block {block} lanes {mask:04b}"))
        }
    };
    ChatToken { id: splice.token_id(t) as u32, by, kind, text }
}

/// A break if either is one.
fn both(a: ControlFlow<()>, b: ControlFlow<()>) -> ControlFlow<()> {
    if a.is_break() {
        a
    } else {
        b
    }
}
