//! `native-host qwengpu chat [-m MODEL | --load DIR]`: a conversation with the spliced model
//! (`kernels_wasm::qwengpu::splice::chat`, docs/qwengpu-second-machine.md §20), in ChatML as
//! SmolLM2-Instruct was trained on it. A turn is a line of text, or a kernel launch:
//!
//! - `/run NAME`: a suite kernel with its own launch and inputs;
//! - `/run FILE.cu|FILE.ptx --block B [--grid G] --arg …`: any kernel, as `qwengpu run` takes it;
//! - `/cuda --block B [--grid G] --arg …`, then the CUDA source on the lines after it, up to a
//!   line `/end` (compiled by clang-19 in the bridge's sandbox);
//! - `/quit` (or the end of the input).
//!
//! A launch is the assistant's turn: the host feeds the program image, the inputs and each step's
//! record, the model's argmax picks every VAL token, the host writes the arrays those tokens
//! carried into the reply as text, and the model goes on from there until `<|im_end|>`.

use super::run::{lay_out, progress, spinner, spliced_model, SplicedModel};
use super::{read_ptx, source::cuda_source_to_ptx, Filter};
use crate::ebpf::tokenize::TextTokenizer;
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use kernels_wasm::qwengpu::args::Layout;
use kernels_wasm::qwengpu::isa::{MachineSpec, Program};
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::splice::chat::{By, Chat};
use kernels_wasm::qwengpu::splice::Runner;
use kernels_wasm::qwengpu::suite;
use std::io::{BufRead, IsTerminal, Write};
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

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub start: usize,
    pub end: usize,
    pub after_launch: bool,
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

/// A turn's kernel, compiled and laid out; `None` for a text turn.
fn kernel_of(turn: &str, spec: &MachineSpec) -> Result<Option<Ready>> {
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
        let ptx = cuda_source_to_ptx(source, Filter::On)?;
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
    let path = PathBuf::from(target);
    if !path.is_file() {
        let names: Vec<&str> = suite::kernels().iter().map(|k| k.name).collect();
        bail!("{target:?} is neither a file nor a suite kernel ({})", names.join(", "));
    }
    from_ptx(&read_ptx(&path)?, target, &line, spec).map(Some)
}

fn from_ptx(ptx: &str, what: &str, line: &LaunchLine, spec: &MachineSpec) -> Result<Ready> {
    let block = line.block.ok_or_else(|| anyhow!("{what}: give --block (threads per block)"))?;
    let (kernel, _, layout) = lay_out(ptx, what, line.kernel.as_deref(), (line.grid, block), &line.args, spec)?;
    Ok(Ready { name: kernel.name, program: kernel.program, layout, expected: None })
}

/// The single id of a special token such as `<|im_end|>`.
fn special(t: &TextTokenizer, text: &str) -> Result<usize> {
    match t.encode(text)?.as_slice() {
        [id] => Ok(*id),
        _ => bail!("the tokenizer has no {text} token: chat needs a ChatML model (SmolLM2-Instruct)"),
    }
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
    let tokenizer = tokenizer.ok_or_else(|| anyhow!("the model has no tokenizer (chat needs one)"))?;
    special(&tokenizer, "<|im_start|>")?;
    let im_end = special(&tokenizer, "<|im_end|>")?;
    let spec = MachineSpec::second();
    let mut chat = Chat::new(Runner::spliced_with(config, &model, &splice, norms)?, &splice);
    let mut replies = Vec::new();
    if let Some(system) = &tokenizer.default_system {
        chat.feed(&tokenizer.encode(&format!("<|im_start|>system\n{system}<|im_end|>\n"))?)?;
    }
    eprintln!("qwenGPU chat: text, /run NAME|FILE [--block B --arg …], /cuda … (source) /end, /quit");
    let mut out = std::io::stdout().lock();
    for turn in turns(a.say.clone()) {
        let turn = turn?;
        if turn.trim() == "/quit" {
            break;
        }
        if turn.trim().is_empty() {
            continue;
        }
        // A kernel that cannot be launched is named, and the turn is not fed.
        let ready = match kernel_of(&turn, &spec) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e:#}");
                continue;
            }
        };
        chat.feed(&tokenizer.encode(&format!("<|im_start|>user\n{turn}<|im_end|>\n<|im_start|>assistant\n"))?)?;
        if let Some(r) = &ready {
            match launch(&mut chat, r, spec, a.max_steps) {
                Ok(said) => {
                    write!(out, "{said}")?;
                    chat.feed(&tokenizer.encode(&said)?)?;
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    chat.feed(&tokenizer.encode("<|im_end|>\n")?)?;
                    continue;
                }
            }
        }
        let start = chat.context.len();
        let (mut text, mut shown) = (Vec::new(), 0);
        let reply = chat.generate(a.max_tokens, &[im_end], |id| {
            // Decoded whole each time, and printed up to a whole character: a character may
            // take several byte-level tokens.
            text.extend((id != im_end).then_some(id));
            if let Ok(d) = tokenizer.decode(&text) {
                let whole = d.trim_end_matches('\u{fffd}');
                if whole.len() > shown && whole.is_char_boundary(shown) {
                    let _ = write!(out, "{}", &whole[shown..]).and_then(|()| out.flush());
                    shown = whole.len();
                }
            }
        })?;
        let decoded = tokenizer.decode(&text)?;
        writeln!(out, "{}", decoded.get(shown..).unwrap_or(""))?;
        replies.push(Reply { start, end: chat.context.len(), after_launch: ready.is_some() });
        let close = if reply.last() == Some(&im_end) { "\n" } else { "<|im_end|>\n" };
        chat.feed(&tokenizer.encode(close)?)?;
        out.flush()?;
    }
    if let Some(path) = &a.transcript {
        let t = Transcript { context: chat.context.clone(), replies };
        std::fs::write(path, serde_json::to_vec(&t)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// One launch in the conversation, streamed as a progress line; what the host then writes into
/// the reply: the arrays as the model's VAL tokens carried them.
fn launch(chat: &mut Chat, r: &Ready, spec: MachineSpec, max_steps: u64) -> Result<String> {
    let bar = spinner()?;
    let mut last = String::new();
    let out = chat
        .launch((spec, &r.program), &r.layout.memory, &r.layout.launch, max_steps, |f| {
            if let Token::Record { warp, block, .. } = f.token {
                last = format!(": warp {warp} ran block {block}");
            }
            bar.set_message(format!("{}{last}", progress(f)));
        })
        .with_context(|| format!("running {} inside the spliced model", r.name))?;
    bar.finish_and_clear();
    let arrays = r.layout.read_arrays(&out.global);
    eprintln!(
        "  [{} ran: {} steps; {} tokens: {} of the prompt and the records by the host, {} VAL tokens chosen by the model{}]",
        r.name,
        out.steps,
        out.tokens,
        out.tokens - out.chosen,
        out.chosen,
        match &r.expected {
            Some(e) if *e == arrays => "; the arrays are the suite's plain Rust ones",
            Some(_) => "; the arrays DIFFER from the suite's plain Rust ones",
            None => "",
        }
    );
    let listed: Vec<String> = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| format!("array {} = [{}]", i + 1, a.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")))
        .collect();
    Ok(format!("The kernel {} ran in {} steps and left {}.", r.name, out.steps, listed.join(" and ")))
}
