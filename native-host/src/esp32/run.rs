//! `native-host esp32 run`: the coordinator. Plans the split of a BitNet model by the nodes'
//! memory, starts emulated nodes when given a count, loads each node's blocks, runs the pipeline
//! and reports per node what the boards would take (modelled) and what the emulation took (wall).

use super::link::Addr;
use super::{now_us, Board};
use crate::sandbox::{self, Limits, Sandbox};
use anyhow::{bail, Context, Result};
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::par::Single;
use kernels_wasm::bitnet::model::sample::Sampler;
use kernels_wasm::bitnet::model::{load, Exec};
use kernels_wasm::esp32::budget::{self, Budget};
use kernels_wasm::esp32::{coord, Cluster, Link, Peer, Timing};
use kernels_wasm::gguf::Gguf;
use kernels_wasm::protocol::esp32::{Esp32Event, Esp32Summary};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// The model (GGUF, architecture bitnet, linear layers in I2_S, TL1 or TL2).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// `auto` (start the fewest emulated nodes that hold the model), a count of emulated nodes to
    /// start, or the nodes' addresses: HOST:PORT,serial:///dev/ttyUSB0@921600,…
    #[arg(long, default_value = "auto")]
    pub nodes: String,
    #[arg(short = 'p', long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 32)]
    pub n_predict: usize,
    /// Context in tokens [default: the prompt plus the tokens to generate].
    #[arg(short = 'c', long)]
    pub ctx_size: Option<usize>,
    /// Temperature; 0 (the default) is greedy, the same tokens as `bitnet run --temp 0`.
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Each node this run starts (and the budget `--nodes auto` plans with).
    #[command(flatten)]
    pub board: Board,
    /// Fault injection: damage about one in N frames the coordinator sends.
    #[arg(long, default_value_t = 0)]
    pub flip_every: u32,
    /// Fault injection: started nodes damage about one in N frames they send.
    #[arg(long, default_value_t = 0)]
    pub node_flip_every: u32,
    /// Silence (ms) after which a request is sent again.
    #[arg(long, default_value_t = 2_000)]
    pub resend_ms: u32,
    /// Silence (ms) after which a node is declared gone.
    #[arg(long, default_value_t = 20_000)]
    pub timeout_ms: u32,
    /// A line per pipeline step with each node's modelled and wall time.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// Emulated nodes this run started; killed when it ends, however it ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in self.0.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What an emulated node may do: run this program, listen on loopback, and nothing else. It opens
/// no file (its blocks come over the link), runs as nobody without capabilities, and its memory is
/// bounded well above the largest board the bridge allows (64 MiB of PSRAM). No file-size limit: it
/// writes only to the stderr it inherits, which may be a long log file, and can create no file.
fn node_sandbox(exe: &std::path::Path) -> Result<Sandbox> {
    let limits = Limits { cpu_seconds: 3600, address_space: 2 << 30, file_size: libc::RLIM_INFINITY, open_files: 64 };
    Ok(Sandbox { exec: sandbox::program_files(exe)?, read: vec![], write: vec![], network: true, limits })
}

/// Starts `n` emulated nodes on free loopback ports, each in its sandbox; their addresses.
fn start_nodes(n: usize, a: &Args) -> Result<(Children, Vec<Addr>)> {
    let exe = std::env::current_exe().context("finding this program to start emulated nodes")?;
    let sandbox = node_sandbox(&exe)?;
    let mut children = Children(Vec::new());
    let mut addrs = Vec::new();
    for i in 0..n {
        let mut child = sandbox
            .command(&exe)?
            .args(["esp32", "node", "--listen", "127.0.0.1:0", "--name"])
            .arg(format!("esp32-s3 #{i} (emulated)"))
            .args(a.board.to_args())
            .args(["--flip-every", &a.node_flip_every.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting emulated node {i}"))?;
        let out = child.stdout.take().context("node stdout")?;
        children.0.push(child);
        let mut lines = BufReader::new(out).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(a) = l.strip_prefix("listening on ") {
                        break a.to_string();
                    }
                }
                _ => bail!("emulated node {i} exited before it listened"),
            }
        };
        // Keep draining the node's log so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        addrs.push(Addr::Tcp(addr));
    }
    Ok((children, addrs))
}

/// Runs the cluster, reporting every event to `on`, checking `stop` between tokens; the tokens
/// and totals.
pub fn cluster_run(a: &Args, stop: &dyn Fn() -> bool, on: &mut dyn FnMut(Esp32Event)) -> Result<Esp32Summary> {
    if a.n_predict == 0 || a.n_predict > 1 << 16 {
        bail!("-n {}: give 1 to 65536 tokens", a.n_predict);
    }
    let file = std::fs::File::open(&a.model).with_context(|| format!("opening {}", a.model.display()))?;
    // SAFETY: read-only map; see `bitnet::open`.
    let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("mapping {}", a.model.display()))?;
    let shared: Shared = Arc::new(map);
    let bytes: &[u8] = (*shared).as_ref();
    let g = Gguf::parse(bytes).with_context(|| format!("{} is not a GGUF file", a.model.display()))?;
    let model = load::load(shared.clone())
        .with_context(|| format!("{} is not a BitNet model this runtime reads", a.model.display()))?;
    let tok = model.tokenizer.as_ref().context("the model has no tokenizer: give it a prompt of ids some other way")?;
    let prompt = tok.encode(&a.prompt, true)?;
    if prompt.is_empty() {
        bail!("the prompt is empty and this model adds no BOS token: nothing to continue from");
    }
    let ctx = a.ctx_size.unwrap_or(prompt.len() + a.n_predict);
    if ctx < prompt.len() + a.n_predict {
        bail!(
            "-c {ctx}: the prompt ({} tokens) and -n {} need {}",
            prompt.len(),
            a.n_predict,
            prompt.len() + a.n_predict
        );
    }
    let (_children, addrs) = match a.nodes.as_str() {
        "auto" => {
            let budget = Budget { sram: a.board.sram, psram: a.board.psram };
            start_nodes(coord::fewest_nodes(&g, bytes, ctx, budget)?, a)?
        }
        s if s.parse::<usize>().is_ok() => {
            let n: usize = s.parse()?;
            if n == 0 || n > 64 {
                bail!("--nodes {n}: start 1 to 64 emulated nodes");
            }
            start_nodes(n, a)?
        }
        s => (Children(Vec::new()), s.split(',').map(Addr::parse).collect::<Result<Vec<_>>>()?),
    };
    let mut peers = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let link: Box<dyn Link + Send> = addr.open()?;
        peers.push(Peer::new(format!("{i} ({addr})"), link).flip_every(a.flip_every, 1 + i as u64));
    }
    let timing = Timing { resend_ms: a.resend_ms.max(10), give_up_ms: a.timeout_ms.max(100), poll_ms: 20 };
    let mut cluster = Cluster::connect(peers, timing, Some(now_us))?;
    let name = a.model.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
    // The prompt echo is text: a prompt that decodes to broken UTF-8 is shown lossily.
    let text = String::from_utf8_lossy(&tok.decode(&prompt)).to_string();
    cluster.load(bytes, &g, ctx, (&name, &text), on)?;
    let ex = Exec::best(&Single);
    let mut sampler = Sampler::new(a.temp, a.seed);
    let mut g = cluster.start(&model, &prompt, &ex, on)?;
    for i in 0..a.n_predict {
        if stop() {
            bail!("cancelled after {i} tokens");
        }
        cluster.next(&model, &mut g, &mut sampler, i + 1 == a.n_predict, &ex, on)?;
    }
    let mut s = cluster.summary(&g);
    s.nodes = cluster.reports()?;
    Ok(s)
}

/// Per-node totals of the generation steps.
#[derive(Default, Clone)]
struct NodeTotals {
    compute_us: u64,
    link_us: u64,
    wall_us: u64,
    bytes_out: u64,
    bytes_in: u64,
    resends: u64,
}

pub fn run(a: Args) -> Result<()> {
    let mut out = std::io::stdout();
    let mut totals: Vec<NodeTotals> = Vec::new();
    let mut names = Vec::new();
    let (mut tokens, mut prompt_end) = (0usize, None::<u32>);
    let result = cluster_run(&a, &|| false, &mut |e| match e {
        Esp32Event::Plan { model, prompt, layers, nodes } => {
            let _ = out.write_all(prompt.as_bytes());
            crate::warn!(
                "{model}: {layers} blocks over {} nodes (embedding and output layer on this host)",
                nodes.len()
            );
            crate::warn!(
                "  node                               blocks   PSRAM used / budget       SRAM used / budget   rows"
            );
            for n in &nodes {
                crate::warn!(
                    "  {:<34} {:>2}..{:<3}  {:>10} / {:<10}  {:>9} / {:<9} {:>4}{}",
                    n.name,
                    n.first,
                    n.first + n.count,
                    budget::bytes(n.weights + n.kv_cache),
                    budget::bytes(n.psram_budget),
                    budget::bytes(n.sram_need),
                    budget::bytes(n.sram_budget),
                    n.max_rows,
                    if n.emulated { "  (emulated)" } else { "" }
                );
                names.push(n.name.clone());
            }
            totals = vec![NodeTotals::default(); nodes.len()];
        }
        Esp32Event::Loaded { node, bytes, link_us, wall_us } => crate::warn!(
            "node {node}: {} of weights loaded in {:.2} s (over the modelled UART: {:.1} s)",
            budget::bytes(bytes),
            wall_us as f64 / 1e6,
            link_us as f64 / 1e6
        ),
        Esp32Event::Step { pos, hops } => {
            if prompt_end.is_none() {
                prompt_end = Some(pos);
            }
            if a.verbose {
                let parts: Vec<String> = hops
                    .iter()
                    .map(|h| {
                        format!(
                            "n{} {:.1}+{:.1} ms {}→{} B",
                            h.node,
                            h.compute_us as f64 / 1e3,
                            h.link_us as f64 / 1e3,
                            h.bytes_out,
                            h.bytes_in
                        )
                    })
                    .collect();
                crate::warn!("pos {pos}: {} (modelled compute+link, bytes to→from)", parts.join(", "));
            }
            // Generation steps only: one row each.
            if hops.first().is_some_and(|h| h.rows == 1) && tokens > 0 {
                for h in hops {
                    if let Some(t) = totals.get_mut(h.node as usize) {
                        t.compute_us += h.compute_us;
                        t.link_us += h.link_us;
                        t.wall_us += h.wall_us;
                        t.bytes_out += h.bytes_out;
                        t.bytes_in += h.bytes_in;
                        t.resends += h.resends as u64;
                    }
                }
            }
        }
        Esp32Event::Token { bytes, .. } => {
            tokens += 1;
            let _ = out.write_all(&bytes);
            let _ = out.flush();
        }
    });
    let _ = writeln!(out);
    match result {
        Ok(s) => {
            let steps = s.tokens.len().saturating_sub(1).max(1) as f64;
            crate::warn!("per generated token (modelled on the boards; wall = this emulation):");
            crate::warn!(
                "  node                               compute ms   link ms   wall ms   bytes to / from  resends"
            );
            for (i, t) in totals.iter().enumerate() {
                crate::warn!(
                    "  {:<34} {:>10.1} {:>9.1} {:>9.1} {:>8.0} / {:<6.0} {:>7}",
                    names.get(i).map(String::as_str).unwrap_or(""),
                    t.compute_us as f64 / 1e3 / steps,
                    t.link_us as f64 / 1e3 / steps,
                    t.wall_us as f64 / 1e3 / steps,
                    t.bytes_out as f64 / steps,
                    t.bytes_in as f64 / steps,
                    t.resends
                );
            }
            for n in &s.nodes {
                crate::warn!(
                    "node {} says: {} forwards, {} damaged frames received, {} answers resent, SRAM {} and PSRAM {} in use",
                    n.node,
                    n.forwards,
                    n.corrupt_in,
                    n.resent,
                    budget::bytes(n.sram_used),
                    budget::bytes(n.psram_used)
                );
            }
            crate::warn!(
                "{} prompt + {} generated tokens: modelled {:.2} tok/s on the boards (link {:.0} % of the time), emulated {:.1} tok/s wall, {} frames resent",
                s.prompt_tokens,
                s.tokens.len(),
                s.modelled_tok_s,
                s.link_share * 100.0,
                s.wall_tok_s,
                s.resends
            );
            Ok(())
        }
        Err(e) => Err(e.context(format!(
            "esp32 run stopped after {tokens} of {} tokens; the output above is incomplete",
            a.n_predict
        ))),
    }
}
