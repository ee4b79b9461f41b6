//! The bridge under hostile load, on loopback only: 32 clients for `SUBSTRATES_SOAK_SECS` seconds
//! (20 in `cargo xtask test`, 120 in `cargo xtask soak`) send a mix of good requests (ping,
//! list_models, model_info, qwengpu_compile, a tiny ebpf_run and esp32_run) and hostile ones
//! (sources that try to read a canary file, cancels, disconnects mid-request, oversized and
//! malformed frames, more connections than the limit, a client that stops reading). A monitor
//! pings throughout. Every completed request must be answered correctly, `busy` only where a limit
//! says so; afterwards no BPF program or map, no child process and no compile directory is left,
//! and the bridge's RSS stayed bounded. The table goes to stdout (`--nocapture`).

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt};
use kernels_wasm::protocol::esp32::{Esp32Model, Esp32Run};
use kernels_wasm::protocol::{close_code, ClientMessage, ErrorCode, Reply, Request, ServerMessage, MAX_FRAME_BYTES};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const CLIENTS: usize = 32;

#[derive(Default)]
struct Tally {
    /// Per kind: completed correctly, and errors by code.
    ok: BTreeMap<&'static str, u64>,
    errors: BTreeMap<(&'static str, String), u64>,
    /// Upgrades refused because every connection slot was taken.
    refused_upgrades: u64,
    wrong: Vec<String>,
}

type Shared = Arc<Mutex<Tally>>;

fn ok(t: &Shared, kind: &'static str) {
    *t.lock().unwrap().ok.entry(kind).or_default() += 1;
}

fn err(t: &Shared, kind: &'static str, code: ErrorCode) {
    *t.lock().unwrap().errors.entry((kind, format!("{code:?}"))).or_default() += 1;
}

fn wrong(t: &Shared, what: String) {
    t.lock().unwrap().wrong.push(what);
}

/// A small deterministic generator (xorshift), one per client.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Plan {
    secret: String,
    hostile: Vec<String>,
    vadd: (&'static str, &'static str),
    ebpf: bool,
    esp32_token: u32,
    deadline: Instant,
}

/// The final frame of request `id`, skipping its events; `None` if the connection went.
async fn outcome(ws: &mut Ws, id: u64) -> Option<Result<Reply, (ErrorCode, String)>> {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await.ok()?? {
            Ok(Message::Text(t)) => match ServerMessage::from_json(t.as_str()).ok()? {
                ServerMessage::Result { id: got, result } if got == id => return Some(Ok(result)),
                ServerMessage::Error(e) if e.id == Some(id) => return Some(Err((e.code, e.message))),
                _ => continue,
            },
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// One request on a connection of its own, judged.
async fn one(ws: &mut Ws, t: &Shared, plan: &Plan, id: u64, rng: &mut Rng) -> bool {
    let kinds = 7 + plan.ebpf as u64;
    let pick = rng.below(kinds);
    let (kind, req): (&'static str, Request) = match pick {
        0 => ("ping", Request::Ping { nonce: id, delay_ms: 0 }),
        1 => ("list_models", Request::ListModels),
        2 => (
            "model_info",
            Request::ModelInfo { root: kernels_wasm::protocol::FileRoot::Models, path: "tiny.gguf".into() },
        ),
        3 => ("compile (good)", Request::QwengpuCompile { cuda: plan.vadd.0.into() }),
        4 | 5 => {
            let src = &plan.hostile[rng.below(plan.hostile.len() as u64) as usize];
            ("compile (hostile)", Request::QwengpuCompile { cuda: src.clone() })
        }
        6 => (
            "esp32_run",
            Request::Esp32Run(Esp32Run {
                model: Esp32Model::Fixture,
                nodes: 0,
                prompt: "The kernel runs the model.".into(),
                max_tokens: 1,
                sram: None,
                psram: Some(300 * 1024),
                link_bps: Some(0),
            }),
        ),
        _ => (
            "ebpf_run",
            Request::EbpfRun {
                model: EbpfModel::TinyRandom { seed: 1 },
                prompt: EbpfPrompt::Ids { ids: vec![1] },
                max_tokens: 1,
                threads: 1,
            },
        ),
    };
    request(ws, id, req).await;
    // One in eight requests is cancelled straight away; the answer is then either the result (it
    // was quicker) or `cancelled`.
    let cancel = rng.below(8) == 0;
    if cancel {
        send(ws, &ClientMessage::Cancel { id }).await;
    }
    let Some(answer) = outcome(ws, id).await else {
        wrong(t, format!("{kind}: the connection closed before request {id} was answered"));
        return false;
    };
    let text = format!("{answer:?}");
    if text.contains(&plan.secret) {
        wrong(t, format!("{kind}: the canary came back: {text}"));
    }
    match (kind, answer) {
        (_, Err((ErrorCode::Cancelled, _))) if cancel => err(t, kind, ErrorCode::Cancelled),
        ("compile (good)" | "compile (hostile)" | "esp32_run" | "ebpf_run", Err((ErrorCode::Busy, _))) => {
            err(t, kind, ErrorCode::Busy)
        }
        ("compile (hostile)", Err((code @ (ErrorCode::BadRequest | ErrorCode::PathRefused), _))) => err(t, kind, code),
        ("ping", Ok(Reply::Pong { nonce })) if nonce == id => ok(t, kind),
        ("list_models", Ok(Reply::Models { models })) if models.iter().any(|m| m.path == "tiny.gguf") => ok(t, kind),
        ("model_info", Ok(Reply::ModelInfo(info))) if info.bytes == 16 => ok(t, kind),
        ("compile (good)", Ok(Reply::QwengpuPtx { ptx })) if ptx == plan.vadd.1 => ok(t, kind),
        ("esp32_run", Ok(Reply::Esp32Done(s))) if s.tokens == [plan.esp32_token] => ok(t, kind),
        ("ebpf_run", Ok(Reply::EbpfDone { generated, .. })) if generated.len() == 1 => ok(t, kind),
        (kind, other) => wrong(t, format!("{kind} (request {id}, cancelled: {cancel}): {other:?}")),
    }
    true
}

/// A client's life: connect, then requests and misbehaviour until the deadline.
async fn client(server: Arc<Server>, t: Shared, plan: Arc<Plan>, seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut id = seed << 32;
    while Instant::now() < plan.deadline {
        let Some(mut ws) = try_connect(&server, &t).await else {
            tokio::time::sleep(Duration::from_millis(50 + rng.below(200))).await;
            continue;
        };
        loop {
            if Instant::now() >= plan.deadline {
                return;
            }
            id += 1;
            match rng.below(40) {
                // Disconnect mid-request: a slow ping, or a run, then the socket is dropped.
                0 => {
                    request(&mut ws, id, Request::Ping { nonce: id, delay_ms: 1_000 }).await;
                    ok(&t, "disconnect mid-request");
                    break;
                }
                // An oversized frame: an error naming it, then a close with 1009.
                1 => {
                    let _ = ws.send(Message::text("x".repeat(MAX_FRAME_BYTES + 1))).await;
                    match (connection_frame(&mut ws).await, connection_frame(&mut ws).await) {
                        (
                            Frame::Msg(ServerMessage::Error(e)),
                            Frame::Closed(Some((close_code::MESSAGE_TOO_BIG, _)) | None),
                        ) if e.code == ErrorCode::FrameTooLarge => ok(&t, "oversized frame"),
                        other => wrong(&t, format!("oversized frame: {other:?}")),
                    }
                    break;
                }
                // Malformed frames: an error each, and the connection lives.
                2 | 3 => {
                    let _ = ws.send(Message::text("{\"type\": \"request\", \"id\": ")).await;
                    let _ = ws.send(Message::binary(vec![0xff; 64])).await;
                    let mut codes = Vec::new();
                    for _ in 0..2 {
                        match connection_frame(&mut ws).await {
                            Frame::Msg(ServerMessage::Error(e)) => codes.push(e.code),
                            other => {
                                wrong(&t, format!("malformed frame: {other:?}"));
                                break;
                            }
                        }
                    }
                    // Two frames without ids: their errors may come in either order.
                    codes.sort_by_key(|c| format!("{c:?}"));
                    if codes == [ErrorCode::BadFrame, ErrorCode::BadJson] {
                        ok(&t, "malformed frame");
                    } else {
                        wrong(&t, format!("malformed frames answered {codes:?}"));
                    }
                }
                // More connections than the limit, held for a moment.
                4 => {
                    let mut extra = Vec::new();
                    for _ in 0..8 {
                        if let Some(ws) = try_connect(&server, &t).await {
                            extra.push(ws);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    ok(&t, "connection burst");
                }
                // Stop reading: a flood of pings that are never read, then the socket goes.
                5 => {
                    for n in 0..2_000u64 {
                        let m = ClientMessage::Request { id: id + n, request: Request::Ping { nonce: n, delay_ms: 0 } };
                        let sent =
                            tokio::time::timeout(Duration::from_millis(500), ws.send(Message::text(m.to_json())));
                        if !matches!(sent.await, Ok(Ok(()))) {
                            break;
                        }
                    }
                    id += 2_000;
                    ok(&t, "stopped reading");
                    break;
                }
                _ => {
                    if !one(&mut ws, &t, &plan, id, &mut rng).await {
                        break;
                    }
                }
            }
        }
    }
}

/// The next frame about the connection itself, skipping late frames of earlier requests (a
/// cancel that lost the race with its request's result is answered `not_found` afterwards).
async fn connection_frame(ws: &mut Ws) -> Frame {
    loop {
        match next_frame(ws).await {
            Frame::Msg(ServerMessage::Error(e)) if e.id.is_some() => continue,
            Frame::Msg(ServerMessage::Result { .. } | ServerMessage::Event { .. }) => continue,
            other => return other,
        }
    }
}

/// A connection, or `None` when the bridge refused the upgrade (counted) or the hello.
async fn try_connect(server: &Server, t: &Shared) -> Option<Ws> {
    let query = format!("?token={TOKEN}");
    let upgrade = connect_raw(server, &query, Some("http://127.0.0.1:8080"));
    let Ok(result) = tokio::time::timeout(Duration::from_secs(10), upgrade).await else {
        wrong(t, "the upgrade took longer than 10 s".into());
        return None;
    };
    match result {
        Ok(mut ws) => {
            let ServerMessage::Hello(_) = recv(&mut ws).await else { return None };
            let hello =
                ClientMessage::Hello { protocol: kernels_wasm::protocol::PROTOCOL_VERSION, client: "soak".into() };
            send(&mut ws, &hello).await;
            Some(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) if r.status() == 503 => {
            t.lock().unwrap().refused_upgrades += 1;
            None
        }
        Err(e) => {
            wrong(t, format!("connect: {e}"));
            None
        }
    }
}

/// What the bridge leaves in the system: BPF objects, its children, compile directories.
#[derive(Debug, PartialEq, Eq)]
struct Residue {
    bpf_programs: BTreeSet<u32>,
    bpf_maps: BTreeSet<u32>,
    children: Vec<String>,
    compile_dirs: Vec<String>,
}

fn residue(bridge: u32) -> Residue {
    let bpf_programs = libbpf_rs::query::ProgInfoIter::default().map(|p| p.id).collect();
    let bpf_maps = libbpf_rs::query::MapInfoIter::default().map(|m| m.id).collect();
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid …: the comm may hold spaces, so split after its ')'.
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        if rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(bridge) {
            children.push(head.to_string() + ")");
        }
    }
    let compile_dirs = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("substrates-cuda-"))
        .collect();
    Residue { bpf_programs, bpf_maps, children, compile_dirs }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_survives_hostile_load() {
    let secs: u64 = std::env::var("SUBSTRATES_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let canary = canary();
    let secret = canary.secret.clone();
    let p = canary.path.display();
    let hostile = vec![
        format!("#include \"{p}\"\n"),
        format!("#include \"qwengpu.h\"\n__device__ const char d[] = {{\n#embed \"{p}\"\n}};\n__global__ void k(char *o) {{ o[threadIdx.x] = d[threadIdx.x]; }}\n"),
        format!("#define F \"{p}\"\n#include F\n"),
        format!("%:include \"/proc/self/root{p}\"\n"),
        "__global__ void f(int *x) { x[0] = ; }\n".to_string(),
    ];
    let vadd = kernels_wasm::qwengpu::suite::kernels().into_iter().find(|k| k.name == "vadd").unwrap();

    let server = Arc::new(start_with("soak", &["--no-include-filter"]));
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");
    let to = server.dir.join("assets/fixtures/bitnet-cpp");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::copy(fixture, to.join("tiny.i2_s.gguf")).unwrap();
    let esp32_token = {
        use kernels_wasm::bitnet::model::{load, par::Single, sample, Cache, Exec, Logits};
        let m = load::load(Arc::new(std::fs::read(fixture).unwrap())).unwrap();
        let prompt = m.tokenizer.as_ref().unwrap().encode("The kernel runs the model.", true).unwrap();
        let mut cache = Cache::new(&m.config, 64);
        sample::greedy(&m.forward(&prompt, &mut cache, &Exec::best(&Single), Logits::Last).unwrap())
    };
    let ebpf = native_host::probe::ebpf().available;
    let pid = server.child.id();
    let before = residue(pid);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let plan =
        Arc::new(Plan { secret: secret.clone(), hostile, vadd: (vadd.cuda, vadd.ptx), ebpf, esp32_token, deadline });
    let tally: Shared = Default::default();

    // The monitor: a ping every 100 ms on its own connection, answered throughout.
    let mut monitor = connect(&server).await;
    let monitor = tokio::spawn(async move {
        let mut latencies = Vec::new();
        let mut id = 1u64;
        while Instant::now() < deadline {
            let sent = Instant::now();
            request(&mut monitor, id, Request::Ping { nonce: id, delay_ms: 0 }).await;
            match tokio::time::timeout(Duration::from_secs(10), recv(&mut monitor)).await {
                Ok(ServerMessage::Result { id: got, result: Reply::Pong { nonce } }) if got == id && nonce == id => {
                    latencies.push(sent.elapsed())
                }
                other => panic!("monitor ping {id}: {other:?}"),
            }
            id += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        latencies
    });
    // Peak RSS, and the peaks of what the leak checks count: they must see children and compile
    // directories while the load runs, or their zeros afterwards would prove nothing.
    let base = (before.bpf_programs.len(), before.bpf_maps.len());
    let sampler = tokio::spawn(async move {
        let (mut rss, mut peak) = (0, (0, 0, 0));
        while Instant::now() < deadline {
            rss = rss.max(rss_kib(pid));
            let r = residue(pid);
            let programs = r.bpf_programs.len().saturating_sub(base.0) + r.bpf_maps.len().saturating_sub(base.1);
            peak = (peak.0.max(r.children.len()), peak.1.max(r.compile_dirs.len()), peak.2.max(programs));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (rss, peak)
    });
    let clients: Vec<_> =
        (0..CLIENTS as u64).map(|i| tokio::spawn(client(server.clone(), tally.clone(), plan.clone(), i + 1))).collect();
    for c in clients {
        c.await.expect("a client panicked");
    }
    let mut latencies = monitor.await.expect("the monitor's pings were not all answered");
    let (max_rss, peak) = sampler.await.unwrap();

    // Quiescence: runs that were cancelled or abandoned finish their cleanup within seconds.
    let settle = Instant::now();
    let mut after = residue(pid);
    while (after.bpf_programs != before.bpf_programs
        || after.bpf_maps != before.bpf_maps
        || !after.children.is_empty()
        || !after.compile_dirs.is_empty())
        && settle.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = residue(pid);
    }
    let alive = server.child.id() == pid && rss_kib(pid) > 0;

    latencies.sort();
    let t = tally.lock().unwrap();
    println!("\nsoak: {CLIENTS} clients for {secs} s (ebpf_run: {})", if ebpf { "on" } else { "off: no BPF here" });
    println!("{:<24} {:>8}  errors by code", "kind", "ok");
    let kinds: BTreeSet<&str> = t.ok.keys().copied().chain(t.errors.keys().map(|k| k.0)).collect();
    for kind in kinds {
        let errors: Vec<String> =
            t.errors.iter().filter(|((k, _), _)| *k == kind).map(|((_, code), n)| format!("{code} {n}")).collect();
        println!("{kind:<24} {:>8}  {}", t.ok.get(kind).copied().unwrap_or(0), errors.join(", "));
    }
    println!(
        "upgrades refused (503, over {} connections): {}",
        native_host::bridge::MAX_CONNECTIONS,
        t.refused_upgrades
    );
    println!(
        "monitor pings: {}; latency p50 {:.1?}, p99 {:.1?}, max {:.1?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1]
    );
    println!("bridge RSS: max {} MiB", max_rss / 1024);
    println!(
        "seen during the run (peaks): {} child processes, {} compile directories, {} BPF objects",
        peak.0, peak.1, peak.2
    );
    let leaked_programs = after.bpf_programs.difference(&before.bpf_programs).count();
    let leaked_maps = after.bpf_maps.difference(&before.bpf_maps).count();
    println!(
        "leaks: {leaked_programs} BPF programs, {leaked_maps} BPF maps, {} child processes, {} compile directories",
        after.children.len(),
        after.compile_dirs.len()
    );
    assert!(alive, "the bridge died");
    assert!(peak.0 > 0 && peak.1 > 0, "the leak checks never saw a child or a compile directory: {peak:?}");
    // One example of each kind of wrong answer.
    let mut seen = BTreeMap::new();
    for w in &t.wrong {
        seen.entry(w.split(':').next().unwrap_or("")).or_insert(w);
    }
    assert!(t.wrong.is_empty(), "{} wrong answers: {seen:#?}", t.wrong.len());
    assert_eq!((leaked_programs, leaked_maps), (0, 0), "BPF objects left behind");
    assert!(after.children.is_empty(), "child processes left: {:?}", after.children);
    assert!(after.compile_dirs.is_empty(), "compile directories left: {:?}", after.compile_dirs);
    assert!(max_rss < 1024 * 1024, "the bridge's RSS reached {} MiB", max_rss / 1024);
    for kind in ["ping", "list_models", "model_info", "compile (good)", "compile (hostile)", "esp32_run"] {
        assert!(t.ok.contains_key(kind) || t.errors.keys().any(|k| k.0 == kind), "no {kind} completed");
    }
    let stderr = std::fs::read_to_string(server.dir.join("stderr.log")).unwrap_or_default();
    assert!(!stderr.contains("panicked"), "the bridge panicked:\n{stderr}");
}
