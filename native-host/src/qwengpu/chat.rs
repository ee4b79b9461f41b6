//! `native-host qwengpu chat [-m MODEL | --load DIR]`: a conversation with the spliced model
//! (`kernels_wasm::qwengpu::splice::chat`, docs/qwengpu-second-machine.md §20), in ChatML as
//! SmolLM2-Instruct was trained on it. A turn is a line of text, or a kernel launch
//! ([`super::conversation`]):
//!
//! - `/run NAME`: a suite kernel with its own launch and inputs;
//! - `/run FILE.cu|FILE.ptx --block B [--grid G] --arg …`: any kernel, as `qwengpu run` takes it;
//! - `/cuda --block B [--grid G] --arg …`, then the CUDA source on the lines after it, up to a
//!   line `/end` (compiled by clang-19 in the bridge's sandbox);
//! - `/quit` (or the end of the input).

use super::conversation::{Conversation, Reach, Reply, Sink, TurnError, Words};
use super::run::{progress, spinner, spliced_model, SplicedModel};
use super::Filter;
use anyhow::{anyhow, Context, Result};
use indicatif::ProgressBar;
use kernels_wasm::protocol::qwengpu::{ChatEvent, FedPart};
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::splice::chat::By;
use kernels_wasm::qwengpu::splice::launch::Fed;
use kernels_wasm::qwengpu::splice::Runner;
use std::io::{BufRead, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The text model to splice the machine into (GGUF or a Hugging Face directory; default: the
    /// SmolLM2 file `cargo xtask` fetches).
    #[arg(short, long, conflicts_with = "load")]
    pub model: Option<PathBuf>,
    /// A checkpoint `qwengpu splice -o DIR` wrote.
    #[arg(long)]
    pub load: Option<PathBuf>,
    /// The most tokens one reply may take.
    #[arg(long, default_value_t = 96)]
    pub max_tokens: usize,
    /// Stop a launch after this many machine steps.
    #[arg(long, default_value_t = 100_000)]
    pub max_steps: u64,
    /// Turns to take instead of reading standard input (a `/cuda` turn's source after a newline).
    #[arg(long = "say")]
    pub say: Vec<String>,
    /// Write the conversation's tokens here at the end (JSON: every id with who chose it, and
    /// where each reply of the model's own text starts and ends).
    #[arg(long)]
    pub transcript: Option<PathBuf>,
}

/// What `--transcript` writes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Transcript {
    pub context: Vec<(usize, By)>,
    /// `[start, end)` in `context` of each stretch of text the model generated, and whether a
    /// launch came before it in its turn.
    pub replies: Vec<Reply>,
}

/// The turns: `--say`'s, else standard input's lines (a `/cuda` turn takes the lines up to `/end`).
fn turns(say: Vec<String>) -> Box<dyn Iterator<Item = Result<String>>> {
    if !say.is_empty() {
        return Box::new(say.into_iter().map(Ok));
    }
    let mut lines = std::io::stdin().lock().lines();
    // A prompt where a person types; none where a file or a pipe feeds the turns.
    let person = std::io::stdin().is_terminal();
    let ask = move |what: &str| {
        if person {
            eprint!("{what}");
        }
    };
    Box::new(std::iter::from_fn(move || {
        ask("\nyou> ");
        let mut turn = match lines.next()? {
            Ok(l) => l,
            Err(e) => return Some(Err(e.into())),
        };
        if turn.trim_start().starts_with("/cuda") {
            loop {
                ask("cuda> ");
                match lines.next() {
                    Some(Ok(l)) if l.trim() == "/end" => break,
                    Some(Ok(l)) => turn = format!("{turn}\n{l}"),
                    Some(Err(e)) => return Some(Err(e.into())),
                    None => return Some(Err(anyhow!("the input ended inside a /cuda turn (close it with /end)"))),
                }
            }
        }
        Some(Ok(turn))
    }))
}

pub fn run(a: Args) -> Result<()> {
    let SplicedModel { config, model, splice, norms, tokenizer } = spliced_model(a.load.as_deref(), a.model.clone())?;
    let words = Words::Text(Box::new(tokenizer.ok_or_else(|| anyhow!("the model has no tokenizer (chat needs one)"))?));
    let runner = Runner::spliced_with(config, &model, &splice, norms)?;
    let mut chat = Conversation::open(runner, &splice, &words, Reach { files: true, filter: Filter::On })?;
    eprintln!("qwenGPU chat: text, /run NAME|FILE [--block B --arg …], /cuda … (source) /end, /quit");
    let mut sink = Terminal { words: &words, bar: None, last: String::new(), text: Vec::new(), shown: 0 };
    for turn in turns(a.say.clone()) {
        let turn = turn?;
        if turn.trim() == "/quit" {
            break;
        }
        if turn.trim().is_empty() {
            continue;
        }
        (sink.text, sink.shown) = (Vec::new(), 0);
        match chat.turn(&turn, a.max_tokens, a.max_steps, &mut sink) {
            Ok(reply) => println!("{}", reply.get(sink.shown..).unwrap_or("")),
            // A kernel that cannot be launched, or a launch that failed, is named; the
            // conversation goes on.
            Err(TurnError::Refused(e) | TurnError::Launch(e)) => {
                sink.clear();
                eprintln!("error: {e:#}");
            }
            Err(e) => return Err(e.into()),
        }
        std::io::stdout().flush()?;
    }
    if let Some(path) = &a.transcript {
        let t = Transcript { context: chat.context().to_vec(), replies: chat.replies.clone() };
        std::fs::write(path, serde_json::to_vec(&t)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The terminal's side: a progress line while a launch runs, its summary on stderr, and the
/// reply on stdout as it is generated.
struct Terminal<'a> {
    words: &'a Words,
    bar: Option<ProgressBar>,
    /// The latest record, for the progress line.
    last: String,
    /// The reply's tokens so far, and how many bytes of their text are printed.
    text: Vec<usize>,
    shown: usize,
}

impl Terminal<'_> {
    fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Sink for Terminal<'_> {
    fn fed(&mut self, f: Fed) -> ControlFlow<()> {
        if let Token::Record { warp, block, .. } = f.token {
            self.last = format!(": warp {warp} ran block {block}");
        }
        if self.bar.is_none() {
            self.bar = spinner().ok();
        }
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}{}", progress(f), if f.steps > 0 { self.last.as_str() } else { "" }));
        }
        ControlFlow::Continue(())
    }

    fn event(&mut self, event: ChatEvent) -> ControlFlow<()> {
        let mut out = std::io::stdout().lock();
        match event {
            ChatEvent::Launched { name, steps, tokens, chosen, suite, .. } => {
                self.clear();
                eprintln!(
                    "  [{name} ran: {steps} steps; {tokens} tokens: {} of the prompt by the host, {chosen} records and VAL tokens chosen by the model{}]",
                    tokens - chosen,
                    match suite {
                        Some(true) => "; the arrays are the suite's plain Rust ones",
                        Some(false) => "; the arrays DIFFER from the suite's plain Rust ones",
                        None => "",
                    }
                );
            }
            ChatEvent::Fed { part: FedPart::Arrays, text, .. } => {
                let _ = write!(out, "{text}");
            }
            ChatEvent::Reply { token } => {
                // Decoded whole each time, and printed up to a whole character: a character may
                // take several byte-level tokens.
                let id = token.id as usize;
                if token.text != "<|im_end|>" {
                    self.text.push(id);
                }
                if let Ok(d) = self.words.decode(&self.text) {
                    let whole = d.trim_end_matches('\u{fffd}');
                    if whole.len() > self.shown && whole.is_char_boundary(self.shown) {
                        let _ = write!(out, "{}", &whole[self.shown..]).and_then(|()| out.flush());
                        self.shown = whole.len();
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}
