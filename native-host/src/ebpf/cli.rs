//! `native-host ebpf run` and `ebpf gen-model`.

use super::forward::BpfModel;
use super::hf;
use super::models;
use anyhow::{bail, Context, Result};
use kernels_wasm::qwen3::model::{Cache, Config, Model};
use kernels_wasm::qwen3::weights::WeightFormat;

pub fn parse_weights(s: &str) -> std::result::Result<WeightFormat, String> {
    WeightFormat::named(s).ok_or_else(|| {
        let names: Vec<&str> = WeightFormat::ALL.iter().map(|f| f.name()).collect();
        format!("{s:?}: give one of {}", names.join(", "))
    })
}
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct RunArgs {
    /// A GGUF file (llama, qwen2, qwen3; its tokenizer inside) or a Hugging Face directory
    /// (config.json + *.safetensors of Qwen3, Qwen2 or Llama; tokenizer.json beside them).
    #[arg(long)]
    model: PathBuf,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "prompt", conflicts_with = "prompt")]
    ids: Vec<usize>,
    /// Prompt text, tokenized with the model's tokenizer (or --tokenizer).
    #[arg(long)]
    prompt: Option<String>,
    /// Wrap the prompt in the model's ChatML markup (its default system turn, a user turn, then
    /// the assistant's).
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// tokenizer.json to use [default: the model's own].
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Tokens to generate (greedy).
    #[arg(short = 'n', default_value_t = 16)]
    tokens: usize,
    /// Threads sharing each matrix (parallel BPF calls on disjoint rows).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// How the kernel stores the matrices: q24 (the engine), or the seed's research variants
    /// bf16-table (BF16 + a BF16→Q24 lookup table) and int4-g128 (4-bit, groups of 128).
    #[arg(long, default_value = "q24", value_parser = parse_weights)]
    weights: WeightFormat,
    /// Run the golden model in userspace instead of the kernel (labelled as such).
    #[arg(long)]
    userspace: bool,
    /// Write every position's logits here, one JSON line each: {"pos", "token", "logits": [...]}.
    #[arg(long, value_name = "FILE")]
    dump_logits: Option<PathBuf>,
    /// Write every BPF call here, one JSON line per position: {"pos", "spans": [...]}.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

pub fn run(mut args: RunArgs) -> Result<()> {
    let n = args.tokens.min(1 << 16);
    let t = Instant::now();
    let loaded = models::load(&args.model, args.tokenizer.as_deref())
        .with_context(|| format!("loading {}", args.model.display()))?;
    let base = Model::from_float(loaded.config, &loaded.float)?;
    // What --userspace runs: the golden model of the storage the kernel would use (the identity
    // for q24).
    let model = base.with_weights(args.weights);
    let c = model.config;
    eprintln!(
        "loaded {} ({}: {} layers, hidden {}, vocab {}) in {:.1} s",
        args.model.display(),
        loaded.format,
        c.layers,
        c.hidden,
        c.vocab,
        t.elapsed().as_secs_f64()
    );
    let tokenizer = loaded.tokenizer;
    if let Some(prompt) = &args.prompt {
        let Some(t) = &tokenizer else {
            bail!(
                "--prompt needs a tokenizer: {} has no tokenizer.json; give --tokenizer or --ids",
                args.model.display()
            )
        };
        let text = if args.chat { t.chat_prompt(prompt) } else { prompt.clone() };
        args.ids = t.encode(&text)?;
        eprintln!("prompt: {} tokens {:?}", args.ids.len(), args.ids);
    }
    if args.ids.is_empty() {
        bail!("the prompt is empty: give --ids or a non-empty --prompt");
    }
    if let Some(bad) = args.ids.iter().find(|&&t| t >= c.vocab) {
        bail!("--ids: token {bad} is outside the vocabulary of {} tokens", c.vocab);
    }
    let positions = args.ids.len() + n;
    let mut bpf = if args.userspace {
        eprintln!("USERSPACE: the golden model runs in this process; nothing runs in the kernel");
        None
    } else {
        super::require_kernel().context("use --userspace to run the golden model instead")?;
        Some(BpfModel::load_as(&base, positions, args.threads, args.weights)?)
    };
    let mut cache = Cache::default();
    let create = |p: &Option<PathBuf>| -> Result<Option<std::io::BufWriter<std::fs::File>>> {
        p.as_ref()
            .map(|p| {
                std::fs::File::create(p)
                    .map(std::io::BufWriter::new)
                    .with_context(|| format!("creating {}", p.display()))
            })
            .transpose()
    };
    let (mut logits_out, mut trace_out) = (create(&args.dump_logits)?, create(&args.trace)?);
    if trace_out.is_some() {
        match bpf.as_mut() {
            Some(b) => b.trace = Some(Vec::new()),
            None => bail!("--trace records BPF calls: it cannot be combined with --userspace"),
        }
    }
    let mut forward = |bpf: &mut Option<BpfModel>, token: usize, pos: usize| -> Result<usize> {
        let step = match bpf.as_mut() {
            Some(b) => b.forward(token, pos)?,
            None => model.forward(token, pos, &mut cache),
        };
        if let Some(f) = logits_out.as_mut() {
            let logits: Vec<f32> = step.logits.iter().map(|&v| v as f32 / 65536.0).collect();
            writeln!(f, "{}", serde_json::json!({ "pos": pos, "token": token, "logits": logits }))?;
        }
        if let (Some(f), Some(spans)) = (trace_out.as_mut(), bpf.as_ref().and_then(|b| b.trace.as_ref())) {
            writeln!(f, "{}", serde_json::json!({ "pos": pos, "spans": spans }))?;
        }
        Ok(step.argmax)
    };
    let start = Instant::now();
    let mut next = 0;
    for (pos, &token) in args.ids.iter().enumerate() {
        next = forward(&mut bpf, token, pos)?;
    }
    let prompt_time = start.elapsed();
    let calls_before = bpf.as_ref().map(|b| b.calls()).unwrap_or(0);
    let start = Instant::now();
    let mut out = std::io::stdout();
    let (mut generated, mut shown) = (Vec::new(), String::new());
    for i in 0..n {
        generated.push(next);
        match &tokenizer {
            // Decode the whole continuation and print what is new: a token may be half a character.
            Some(t) => {
                let text = t.decode(&generated)?;
                if let Some(new) = text.strip_prefix(shown.as_str()) {
                    write!(out, "{new}")?;
                }
                shown = text;
            }
            None => write!(out, "{next} ")?,
        }
        out.flush()?;
        if i + 1 < n {
            next = forward(&mut bpf, next, args.ids.len() + i)?;
        }
    }
    writeln!(out)?;
    let per = start.elapsed().as_secs_f64() / n.saturating_sub(1).max(1) as f64;
    match &bpf {
        Some(b) => eprintln!(
            "prompt {:.3} s; {per:.3} s/token, {} bpf calls/token ({} threads, in the kernel)",
            prompt_time.as_secs_f64(),
            (b.calls() - calls_before) / n.saturating_sub(1).max(1) as u64,
            b.threads
        ),
        None => eprintln!("prompt {:.3} s; {per:.3} s/token (USERSPACE golden model)", prompt_time.as_secs_f64()),
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct GenArgs {
    /// tiny or qwen3-0.6b (about 1.5 GB of BF16).
    #[arg(long, default_value = "tiny")]
    shape: String,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Copy this tokenizer.json into the directory (its vocabulary must fit the shape's).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn gen_model(args: GenArgs) -> Result<()> {
    let config = Config::named(&args.shape)
        .ok_or_else(|| anyhow::anyhow!("--shape {:?}: give tiny or qwen3-0.6b", args.shape))?;
    let t = Instant::now();
    hf::write_random(&args.out, config, args.seed)?;
    if let Some(t) = &args.tokenizer {
        std::fs::copy(t, args.out.join("tokenizer.json")).with_context(|| format!("copying {}", t.display()))?;
    }
    eprintln!("wrote {} ({}) in {:.1} s", args.out.display(), args.shape, t.elapsed().as_secs_f64());
    Ok(())
}
