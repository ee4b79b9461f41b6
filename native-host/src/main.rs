//! `native-host`: the substrates bridge and command-line tools.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use native_host::bridge::{self, Config, DEFAULT_ORIGINS};
use native_host::files::Roots;
use native_host::qwengpu::Filter;
use native_host::{probe, token};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "native-host", version, about = "substrates native host: websocket bridge and CLIs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the websocket bridge the playground connects to.
    Serve(ServeArgs),
    /// Print what this machine can do (in-kernel eBPF, clang-19) and exit.
    Probe,
    /// BitNet b1.58: kernels and whole models (dummy, convert, run, bench).
    #[command(subcommand)]
    Bitnet(BitnetCommand),
    /// qwen3-ebpf: Qwen3 operators as verified BPF programs in this machine's kernel.
    #[command(subcommand)]
    Ebpf(EbpfCommand),
    /// ESP32-S3 cluster: BitNet blocks split across microcontroller nodes (emulated or on serial).
    #[command(subcommand)]
    Esp32(Esp32Command),
    /// qwenGPU: the 4-lane SIMT machine.
    #[command(subcommand)]
    Qwengpu(QwengpuCommand),
    /// WebGPU kernels through wgpu (Vulkan here; Mesa lavapipe without a GPU).
    #[command(subcommand)]
    Gpu(GpuCommand),
}

#[derive(Subcommand)]
enum GpuCommand {
    /// BitNet GEMV/GEMM per format on this machine's adapter: weights/s, checked against the CPU.
    Bench(native_host::gpu::BenchArgs),
}

#[derive(Subcommand)]
enum Esp32Command {
    /// An emulated node: the node program behind a TCP port, in its memory budget, its link
    /// slowed to the modelled UART.
    Node(native_host::esp32::node::Args),
    /// Plan, load and run a model across nodes (started here, or at the given addresses).
    Run(native_host::esp32::run::Args),
}

#[derive(Subcommand)]
enum QwengpuCommand {
    /// CUDA C (clang-19) or PTX → the machine's ROM blocks, printed.
    Compile(native_host::qwengpu::CompileArgs),
    /// Any kernel (.cu or .ptx) on the compiled layers, checked in lockstep: one --arg per
    /// parameter (`[1,2,3]`, `zeros:N` or a scalar); prints the arrays, the steps and the tokens.
    Run(native_host::qwengpu::run::Args),
    /// The suite on the compiled layers (checked in lockstep, then timed): machine steps per second.
    Bench(native_host::qwengpu::bench::Args),
    /// Tokens per machine step if a language model ran it one step per position: the record
    /// token plus two per word a later step reads (liveness over the ROM), per suite kernel.
    Carry(native_host::qwengpu::carry::Args),
    /// The second machine's ALU for one lane (SwiGLU layers on 8-bit limbs): its size, and random
    /// operands checked against the ISA.
    Alu(native_host::qwengpu::alu::Args),
    /// Writes SmolLM2 (or -m MODEL) with the second machine spliced in as a checkpoint:
    /// config.json, model.safetensors (compiled matrices as coordinates and values), tokenizer.json
    /// and tokenizer_config.json (the chat template).
    Splice(native_host::qwengpu::checkpoint::Args),
    /// The second machine spliced into SmolLM2 (or -m MODEL): KL(plain ‖ spliced) over English
    /// text, and greedy continuations of ten prompts compared.
    Drift(native_host::qwengpu::drift::Args),
    /// A conversation with the spliced model (or --load DIR): text turns, and kernels launched
    /// from a turn (/run NAME|FILE …, /cuda … /end) whose steps the model generates.
    Chat(native_host::qwengpu::chat::Args),
    /// The suite on a real NVIDIA GPU: --emit writes nvcc harnesses and run.sh; --compare checks
    /// what they printed against the plain Rust versions.
    Nvcc(native_host::qwengpu::nvcc::Args),
}

#[derive(Subcommand)]
enum EbpfCommand {
    /// Time each in-kernel operator on the Qwen3-0.6B shapes against the golden model.
    OpBench(native_host::ebpf::op_bench::Args),
    /// Greedy decoding of a generated model with every operator in the kernel, against the
    /// golden model: s/token, bpf calls/token, identical logits checked at every step.
    Bench(native_host::ebpf::op_bench::ModelArgs),
    /// Greedy generation from a Qwen3 directory with every operator in the kernel.
    Run(native_host::ebpf::cli::RunArgs),
    /// Write a Qwen3 directory with deterministic random weights (tiny, or the 0.6B shape).
    GenModel(native_host::ebpf::cli::GenArgs),
}

#[derive(Subcommand)]
enum BitnetCommand {
    /// Time the GEMV kernels per format, backend and shape against scalar and f32.
    KernelBench(native_host::bitnet::kernel_bench::Args),
    /// Write a dummy model (bitnet.cpp's layouts, random weights from a seed) as GGUF.
    Dummy(native_host::bitnet::dummy::Args),
    /// Convert an f32/f16 (or already ternary) BitNet GGUF to I2_S, TL1 or TL2.
    Convert(native_host::bitnet::convert::Args),
    /// Generate text from a prompt, streamed (like run_inference.py); --cnv chats on stdin.
    Run(native_host::bitnet::run::Args),
    /// Prompt processing and generation speed, as llama-bench prints it (like e2e_benchmark.py).
    Bench(native_host::bitnet::bench::Args),
    /// KL divergence of a model's next-token distributions from a base model's over text.
    Kl(native_host::bitnet::kl::Args),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes a program loader to the network.
    #[arg(long, default_value = "127.0.0.1:8787")]
    bind: SocketAddr,
    /// Directory of models the bridge may read (nothing outside it or assets/ is ever opened).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// The repository's assets/ directory [default: the one beside this crate, if present].
    #[arg(long)]
    assets_dir: Option<PathBuf>,
    /// Another page origin allowed to connect (repeatable), e.g. http://127.0.0.1:9000.
    #[arg(long = "allow-origin", value_name = "URL")]
    allow_origin: Vec<String>,
    /// Skip the friendly line filter on CUDA source (the sandbox alone then keeps host files
    /// unread; the tests use this to prove it).
    #[arg(long, hide = true)]
    no_include_filter: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => serve(args).await,
        Command::Bitnet(BitnetCommand::KernelBench(args)) => native_host::bitnet::kernel_bench::run(args),
        Command::Bitnet(BitnetCommand::Dummy(args)) => native_host::bitnet::dummy::run(args),
        Command::Bitnet(BitnetCommand::Convert(args)) => native_host::bitnet::convert::run(args),
        Command::Bitnet(BitnetCommand::Run(args)) => native_host::bitnet::run::run(args),
        Command::Bitnet(BitnetCommand::Bench(args)) => native_host::bitnet::bench::run(args),
        Command::Bitnet(BitnetCommand::Kl(args)) => native_host::bitnet::kl::run(args),
        Command::Ebpf(EbpfCommand::OpBench(args)) => native_host::ebpf::op_bench::run(args),
        Command::Ebpf(EbpfCommand::Bench(args)) => native_host::ebpf::op_bench::run_model(args),
        Command::Ebpf(EbpfCommand::Run(args)) => native_host::ebpf::cli::run(args),
        Command::Ebpf(EbpfCommand::GenModel(args)) => native_host::ebpf::cli::gen_model(args),
        Command::Esp32(Esp32Command::Node(args)) => native_host::esp32::node::run(args),
        Command::Esp32(Esp32Command::Run(args)) => native_host::esp32::run::run(args),
        Command::Qwengpu(QwengpuCommand::Compile(args)) => native_host::qwengpu::compile(args),
        Command::Qwengpu(QwengpuCommand::Run(args)) => native_host::qwengpu::run::run(args),
        Command::Qwengpu(QwengpuCommand::Bench(args)) => native_host::qwengpu::bench::run(args),
        Command::Qwengpu(QwengpuCommand::Carry(args)) => native_host::qwengpu::carry::run(args),
        Command::Qwengpu(QwengpuCommand::Alu(args)) => native_host::qwengpu::alu::run(args),
        Command::Qwengpu(QwengpuCommand::Drift(args)) => native_host::qwengpu::drift::run(args),
        Command::Qwengpu(QwengpuCommand::Chat(args)) => native_host::qwengpu::chat::run(args),
        Command::Qwengpu(QwengpuCommand::Splice(args)) => native_host::qwengpu::checkpoint::run(args),
        Command::Qwengpu(QwengpuCommand::Nvcc(args)) => native_host::qwengpu::nvcc::run(args),
        Command::Gpu(GpuCommand::Bench(args)) => native_host::gpu::bench(args),
        Command::Probe => {
            let caps = probe::capabilities();
            native_host::say!("{}", serde_json::to_string_pretty(&caps)?);
            Ok(())
        }
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let token = match std::env::var("NATIVE_HOST_TOKEN") {
        Ok(t) => {
            token::validate(&t).map_err(anyhow::Error::msg).context("NATIVE_HOST_TOKEN")?;
            t
        }
        Err(_) => token::generate().context("reading /dev/urandom for the session token")?,
    };
    for origin in &args.allow_origin {
        if !(origin.starts_with("http://") || origin.starts_with("https://")) {
            bail!("--allow-origin {origin:?}: an origin looks like http://host:port");
        }
    }
    let assets_dir = args.assets_dir.or_else(|| {
        let beside = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets"));
        beside.is_dir().then_some(beside)
    });
    let roots = Roots::new(args.models_dir.as_deref(), assets_dir.as_deref()).context("--models-dir / --assets-dir")?;
    let capabilities = tokio::task::spawn_blocking(probe::capabilities).await?;
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("cannot listen on {} (is another bridge running? pass --bind)", args.bind))?;
    let addr = listener.local_addr()?;
    let mut allowed_origins: Vec<String> = DEFAULT_ORIGINS.iter().map(|s| s.to_string()).collect();
    allowed_origins.extend(args.allow_origin);

    let version = env!("CARGO_PKG_VERSION");
    native_host::say!("native-host {version}: substrates bridge");
    native_host::say!("  eBPF:    {}", describe(&capabilities.ebpf));
    native_host::say!("  clang:   {}", describe(&capabilities.clang));
    for root in [kernels_wasm::protocol::FileRoot::Models, kernels_wasm::protocol::FileRoot::Assets] {
        let shown = roots.root(root).map(|p| p.display().to_string()).unwrap_or_else(|| "(none)".into());
        native_host::say!("  {:<8} {shown}", format!("{root:?}:").to_lowercase());
    }
    native_host::say!("  origins: {}", allowed_origins.join(", "));
    if !addr.ip().is_loopback() {
        native_host::say!(
            "WARNING: listening on {addr}, reachable from other machines; anyone with the token can load BPF programs"
        );
    }
    native_host::say!("listening on {}", bridge::ws_url(addr));
    native_host::say!("session token: {token}");
    native_host::say!("playground: http://127.0.0.1:8080/?token={token}");

    let config = Config {
        token,
        allowed_origins,
        roots,
        capabilities,
        host_version: version.to_string(),
        ebpf_run: Default::default(),
        esp32_run: Default::default(),
        qwengpu_chat: Default::default(),
        include_filter: if args.no_include_filter { Filter::Off } else { Filter::On },
    };
    tokio::select! {
        () = bridge::serve(listener, config) => {}
        r = shutdown_signal() => { r?; native_host::say!("native-host: shutting down"); }
    }
    Ok(())
}

fn describe(p: &kernels_wasm::protocol::ProbeResult) -> String {
    format!("{} — {}", if p.available { "yes" } else { "no" }, p.detail)
}

async fn shutdown_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
