//! The ESP32 tab's logic: a cluster of nodes in this page (the node program in wasm, linked in
//! memory through the same framing), and what the tab shows of a run from either the page's
//! cluster or the bridge's, built from the same [`Esp32Event`]s.

use super::bitnet_model::{model_bytes, Source};
use super::plot::Points;
use super::timeline::Span;
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::par::Single;
use kernels_wasm::bitnet::model::sample::Sampler;
use kernels_wasm::bitnet::model::{load, table, Exec, Model};
use kernels_wasm::esp32::budget::Budget;
use kernels_wasm::esp32::coord::{self, Generation};
use kernels_wasm::esp32::local::Local;
use kernels_wasm::esp32::msg::Caps;
use kernels_wasm::esp32::node::Clock;
use kernels_wasm::esp32::{Cluster, Node, Peer, Timing};
use kernels_wasm::gguf::Gguf;
use kernels_wasm::protocol::esp32::{Esp32Event, Esp32Summary, Hop, NodePlan};
use kernels_wasm::protocol::{FileRoot, ModelEntry};
use std::sync::Arc;

/// What a run is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub source: Source,
    /// 0: the fewest nodes that hold the model.
    pub nodes: u32,
    pub budget: Budget,
    /// UART bits per second; 0 unthrottled.
    pub link_bps: u64,
    pub prompt: String,
    pub tokens: usize,
}

/// Everything the tab shows of a run, whichever side ran it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunView {
    pub model: String,
    pub prompt: String,
    pub layers: u32,
    pub nodes: Vec<NodePlan>,
    /// Per node: bytes loaded and the modelled UART time for them.
    pub loaded: Vec<(u32, u64, u64)>,
    pub steps: Vec<(u32, Vec<Hop>)>,
    pub text: Vec<u8>,
    pub tokens: Vec<u32>,
    pub summary: Option<Esp32Summary>,
    pub error: Option<String>,
}

impl RunView {
    pub fn apply(&mut self, e: Esp32Event) {
        match e {
            Esp32Event::Plan { model, prompt, layers, nodes } => {
                self.model = model;
                self.prompt = prompt;
                self.layers = layers;
                self.nodes = nodes;
            }
            Esp32Event::Loaded { node, bytes, link_us, .. } => self.loaded.push((node, bytes, link_us)),
            Esp32Event::Step { pos, hops } => self.steps.push((pos, hops)),
            Esp32Event::Token { id, bytes, .. } => {
                self.tokens.push(id);
                self.text.extend_from_slice(&bytes);
            }
        }
    }
}

/// The GGUF files in the bridge's models directory, sorted: models the bridge can split too.
pub fn gguf_files(entries: &[ModelEntry]) -> Vec<String> {
    let mut files: Vec<String> = entries
        .iter()
        .filter(|e| e.root == FileRoot::Models && e.path.to_ascii_lowercase().ends_with(".gguf"))
        .map(|e| e.path.clone())
        .collect();
    files.sort();
    files
}

/// Which node holds each block (`None`: unplaced).
pub fn placement(nodes: &[NodePlan], layers: u32) -> Vec<Option<usize>> {
    (0..layers).map(|b| nodes.iter().position(|n| (n.first..n.first + n.count).contains(&b))).collect()
}

/// The speed of each one-token step (generation; the prompt goes in batches of several rows),
/// as tokens per second: (position, modelled on the boards, emulated wall), from the steps' hops.
pub fn token_rates(steps: &[(u32, Vec<Hop>)]) -> (Points, Points) {
    let per_s = |us: u64| if us == 0 { f64::NAN } else { 1e6 / us as f64 };
    steps
        .iter()
        .filter(|(_, hops)| !hops.is_empty() && hops.iter().all(|h| h.rows == 1))
        .map(|(pos, hops)| {
            let modelled = hops.iter().fold(0u64, |a, h| a.saturating_add(h.compute_us).saturating_add(h.link_us));
            let wall = hops.iter().fold(0u64, |a, h| a.saturating_add(h.wall_us));
            ((*pos as f64, per_s(modelled)), (*pos as f64, per_s(wall)))
        })
        .unzip()
}

/// One pipeline step on the modelled boards, hop after hop: the activation out over the link,
/// the node's blocks, the activation back. Nanoseconds from the step's start.
pub fn hop_spans(hops: &[Hop]) -> Vec<Span> {
    let mut t = 0u64;
    let mut spans = Vec::new();
    let mut push = |name: String, us: u64, t: &mut u64| {
        spans.push(Span { name, start_ns: *t, end_ns: *t + us * 1000 });
        *t += us * 1000;
    };
    for h in hops {
        let half = h.link_us / 2;
        let resent = if h.resends > 0 { format!(", {} resent", h.resends) } else { String::new() };
        push(format!("link → node {} ({} B{resent})", h.node, h.bytes_out), half, &mut t);
        push(format!("node {} blocks ({} rows)", h.node, h.rows), h.compute_us, &mut t);
        push(format!("link ← node {} ({} B)", h.node, h.bytes_in), h.link_us - half, &mut t);
    }
    spans
}

/// A fraction for a bar, clamped to `0..=1`.
pub fn fraction(used: u64, budget: u64) -> f64 {
    if budget == 0 {
        0.0
    } else {
        (used as f64 / budget as f64).clamp(0.0, 1.0)
    }
}

fn now_us() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        web_sys::window().and_then(|w| w.performance()).map(|p| (p.now() * 1000.0) as u64).unwrap_or(0)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::time::Instant;
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_micros() as u64
    }
}

/// A cluster of nodes in this page.
pub struct InPage {
    model: Model,
    cluster: Cluster<Local>,
    gen: Generation,
    sampler: Sampler,
    limit: usize,
}

fn exec() -> Exec<'static> {
    let backend = Backend::best();
    Exec { backend, par: &Single, simd: backend != Backend::Scalar && table::simd_available(), reference: false }
}

impl InPage {
    /// Builds the model, plans and loads the nodes, runs the prompt.
    pub fn start(s: &Settings, on: &mut dyn FnMut(Esp32Event)) -> Result<InPage, String> {
        let bytes = model_bytes(s.source, 1)?;
        let shared: Shared = Arc::new(bytes);
        let model = load::load(shared.clone()).map_err(|e| e.to_string())?;
        let file: &[u8] = (*shared).as_ref();
        let g = Gguf::parse(file).map_err(|e| e.to_string())?;
        let tok = model.tokenizer.as_ref().ok_or("the model has no tokenizer")?;
        let prompt = tok.encode(&s.prompt, true).map_err(|e| e.to_string())?;
        if prompt.is_empty() || s.tokens == 0 {
            return Err("give a prompt and at least one token".into());
        }
        let ctx = prompt.len() + s.tokens;
        let nodes = match s.nodes {
            0 => coord::fewest_nodes(&g, file, ctx, s.budget).map_err(|e| e.to_string())?,
            n => n as usize,
        };
        let clock: Clock = now_us;
        let peers = (0..nodes)
            .map(|i| {
                let caps = Caps {
                    name: format!("esp32-s3 #{i} (in this page)"),
                    sram: s.budget.sram,
                    psram: s.budget.psram,
                    clock_hz: 240_000_000,
                    link_bps: s.link_bps,
                    emulated: true,
                };
                // The node program with this page's fastest kernels: the same bits as the scalar
                // path a board runs (tested), sooner.
                Peer::new(format!("{i} (in this page)"), Local::new(Node::new(caps, Backend::best(), Some(clock))))
            })
            .collect();
        let mut cluster = Cluster::connect(peers, Timing::default(), Some(clock)).map_err(|e| e.to_string())?;
        let name = s.source.label();
        let text = String::from_utf8_lossy(&tok.decode(&prompt)).into_owned();
        cluster.load(file, &g, ctx, (&name, &text), on).map_err(|e| e.to_string())?;
        let gen = cluster.start(&model, &prompt, &exec(), on).map_err(|e| e.to_string())?;
        Ok(InPage { model, cluster, gen, sampler: Sampler::new(0.0, 0), limit: s.tokens })
    }

    pub fn done(&self) -> bool {
        self.gen.tokens.len() >= self.limit
    }

    /// One more token through the pipeline.
    pub fn step(&mut self, on: &mut dyn FnMut(Esp32Event)) -> Result<(), String> {
        if self.done() {
            return Ok(());
        }
        let last = self.gen.tokens.len() + 1 == self.limit;
        self.cluster
            .next(&self.model, &mut self.gen, &mut self.sampler, last, &exec(), on)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The totals, with each node's own account.
    pub fn summary(&mut self) -> Result<Esp32Summary, String> {
        let mut s = self.cluster.summary(&self.gen);
        s.nodes = self.cluster.reports().map_err(|e| e.to_string())?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn the_page_cluster_prints_what_bitnet_cpp_printed_and_shows_every_node() {
        let want = include_bytes!("../../../assets/fixtures/bitnet-cpp/greedy-32.bin");
        // 300 KiB of PSRAM holds one of the fixture's two blocks.
        let s = Settings {
            source: Source::Fixture,
            nodes: 0,
            budget: Budget { sram: 512 * 1024, psram: 300 * 1024 },
            link_bps: 921_600,
            prompt: super::super::bitnet_model::FIXTURE_PROMPT.into(),
            tokens: 32,
        };
        let mut v = RunView::default();
        let mut run = InPage::start(&s, &mut |e| v.apply(e)).unwrap();
        while !run.done() {
            run.step(&mut |e| v.apply(e)).unwrap();
        }
        assert_eq!(v.text, want[..want.len() - 2]);
        assert_eq!(v.nodes.len(), 2);
        assert_eq!(placement(&v.nodes, v.layers), [Some(0), Some(1)]);
        let (_, last) = v.steps.last().unwrap();
        let spans = hop_spans(last);
        assert_eq!(spans.len(), 6);
        // Back to back, in hop order, as long as the modelled times.
        assert!(spans.windows(2).all(|w| w[0].end_ns == w[1].start_ns));
        let total: u64 = last.iter().map(|h| h.compute_us + h.link_us).sum();
        assert_eq!(spans.last().unwrap().end_ns, total * 1000);
        let sum = run.summary().unwrap();
        assert_eq!(sum.nodes.iter().map(|n| n.forwards).collect::<Vec<_>>(), [32, 32]);
        assert!(sum.modelled_tok_s > 0.0 && sum.link_share > 0.0 && sum.link_share < 1.0, "{sum:?}");
        // The chart's per-token rates: one per generation step, and together the run's rate
        // (the coordinator sums the same steps' times).
        let (modelled, wall) = token_rates(&v.steps);
        assert_eq!(modelled.len(), wall.len());
        assert!(modelled.windows(2).all(|w| w[0].0 < w[1].0), "positions in order");
        let seconds: f64 = modelled.iter().map(|(_, r)| 1.0 / r).sum();
        let overall = modelled.len() as f64 / seconds;
        assert!((overall - sum.modelled_tok_s).abs() <= 1e-9 * overall, "{overall} vs {}", sum.modelled_tok_s);
    }

    #[test]
    fn the_bridge_offers_its_models_directorys_gguf_files() {
        let e = |root, path: &str| ModelEntry { root, path: path.into(), bytes: 1 };
        let entries = [
            e(FileRoot::Models, "z.gguf"),
            e(FileRoot::Models, "qwen/config.json"),
            e(FileRoot::Assets, "fixtures/bitnet-cpp/tiny.i2_s.gguf"),
            e(FileRoot::Models, "a/B.GGUF"),
        ];
        assert_eq!(gguf_files(&entries), ["a/B.GGUF", "z.gguf"]);
    }

    #[test]
    fn a_model_that_does_not_fit_the_nodes_asked_for_is_refused_with_the_numbers() {
        let s = Settings {
            source: Source::Fixture,
            nodes: 1,
            budget: Budget { sram: 512 * 1024, psram: 300 * 1024 },
            link_bps: 0,
            prompt: "hi".into(),
            tokens: 4,
        };
        let e = InPage::start(&s, &mut |_| {}).err().unwrap_or_default();
        assert!(e.contains("more nodes"), "{e}");
        assert!((fraction(3, 4) - 0.75).abs() < 1e-12 && fraction(5, 4) == 1.0 && fraction(1, 0) == 0.0);
    }
}
