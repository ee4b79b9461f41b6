//! The ESP32 tab: a BitNet model split across ESP32-S3 nodes. The nodes run in this page (the
//! node program in wasm, linked through the real framing) or as processes on the bridge's host;
//! both are emulations, and the tab says so. It shows the cluster, which node holds which block,
//! each node's memory against its budget, every pipeline step on the modelled boards' time
//! axis, the tokens as they arrive, and modelled against emulated throughput.

use crate::bridge::Bridge;
use crate::components::{LineChart, NumberInput, Timeline};
use crate::logic::bitnet_model::{Source, FIXTURE_PROMPT};
use crate::logic::esp32::{fraction, gguf_files, hop_spans, placement, token_rates, InPage, RunView, Settings};
use kernels_wasm::esp32::budget::{bytes, Budget, KIB};
use kernels_wasm::protocol::esp32::{Esp32Model, Esp32Run, NodePlan};
use kernels_wasm::protocol::{Event, Reply, Request, ServerMessage};
use leptos::prelude::*;
use std::time::Duration;

/// bitnet.cpp's greedy output for the fixture prompt (and llama-cli's two closing newlines).
const FIXTURE_GREEDY: &[u8] = include_bytes!("../../../assets/fixtures/bitnet-cpp/greedy-32.bin");
const LINKS: [(u64, &str); 4] =
    [(921_600, "UART 921600"), (460_800, "UART 460800"), (115_200, "UART 115200"), (0, "unthrottled")];
const SLICE_MS: f64 = 40.0;

fn now() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}

#[derive(Clone, Copy)]
struct Ui {
    busy: RwSignal<bool>,
    /// The bridge request of a run on the host, to cancel it.
    request: RwSignal<Option<kernels_wasm::protocol::RequestId>>,
    /// Set by "stop": the page's run ends at its next slice.
    stop: RwSignal<bool>,
    status: RwSignal<String>,
    view: RwSignal<RunView>,
    step: RwSignal<Option<usize>>,
    run: StoredValue<Option<InPage>, LocalStorage>,
}

#[component]
pub fn Esp32Tab() -> impl IntoView {
    let bridge = expect_context::<Bridge>();
    let source = RwSignal::new(0usize);
    let nodes = RwSignal::new(0u32);
    let sram_kib = RwSignal::new(512u64);
    let psram_kib = RwSignal::new(8192u64);
    let link = RwSignal::new(921_600u64);
    let prompt = RwSignal::new(FIXTURE_PROMPT.to_string());
    let tokens = RwSignal::new(32usize);
    let on_bridge = RwSignal::new(false);
    let ui = Ui {
        busy: RwSignal::new(false),
        request: RwSignal::new(None),
        stop: RwSignal::new(false),
        status: RwSignal::new(String::new()),
        view: RwSignal::new(RunView::default()),
        step: RwSignal::new(None),
        run: StoredValue::new_local(None),
    };
    let connected = move || bridge.status.with(|s| s.hello().is_some());
    // GGUF files in the bridge's models directory: choices after the page's own models.
    let files = RwSignal::new(Vec::<String>::new());
    Effect::new(move |_| {
        if connected() {
            let _ = bridge.request(Request::ListModels, move |m| {
                if let ServerMessage::Result { result: Reply::Models { models }, .. } = m {
                    files.set(gguf_files(models));
                }
                true
            });
        }
    });
    let start = move |_| {
        if ui.busy.get_untracked() {
            return;
        }
        let src = source.get_untracked();
        let file = src.checked_sub(Source::ALL.len()).and_then(|i| files.with_untracked(|f| f.get(i).cloned()));
        if file.is_some() && !connected() {
            ui.view.set(RunView {
                error: Some("a model from the bridge's directory needs the bridge".into()),
                ..RunView::default()
            });
            return;
        }
        let s = Settings {
            source: Source::ALL[src.min(Source::ALL.len() - 1)],
            nodes: nodes.get_untracked(),
            budget: Budget { sram: sram_kib.get_untracked() * KIB, psram: psram_kib.get_untracked() * KIB },
            link_bps: link.get_untracked(),
            prompt: prompt.get_untracked(),
            tokens: tokens.get_untracked(),
        };
        ui.busy.set(true);
        ui.stop.set(false);
        ui.view.set(RunView::default());
        ui.step.set(None);
        if file.is_some() || (on_bridge.get_untracked() && connected()) {
            run_on_bridge(ui, bridge, s, file);
        } else {
            ui.status.set("building the model and loading the nodes in this page…".into());
            set_timeout(move || run_in_page(ui, s), Duration::from_millis(30));
        }
    };
    view! {
        <section class="esp32" data-testid="esp32-tab">
            <h2>"BitNet b1.58 across ESP32-S3 nodes"</h2>
            <p>
                "Each node holds a contiguous range of blocks within its SRAM and PSRAM and runs them with the node program ("
                <code>"kernels-wasm::esp32"</code>
                ", which also builds for a microcontroller); the coordinator keeps the embedding and the output layer and passes the activations along. "
                <strong>"Every node here is emulated"</strong>
                ": in this page, or as processes on the bridge's host. Board times are modelled from counted operations (240 MHz, PSRAM at 40 MB/s, the UART's baud rate); wall times are this emulation's."
            </p>
            <div class="controls">
                <label>
                    "model "
                    <select data-testid="esp32-model" on:change=move |ev| source.set(event_target_value(&ev).parse().unwrap_or(0))>
                        {Source::ALL
                            .iter()
                            .enumerate()
                            .map(|(i, s)| view! { <option value=i.to_string()>{s.label()}</option> })
                            .collect_view()}
                        {move || {
                            files
                                .get()
                                .into_iter()
                                .enumerate()
                                .map(|(i, f)| {
                                    view! { <option value=(Source::ALL.len() + i).to_string()>{format!("{f} (the bridge's models directory)")}</option> }
                                })
                                .collect_view()
                        }}
                    </select>
                </label>
                <label>
                    "nodes "
                    <select data-testid="esp32-nodes" on:change=move |ev| nodes.set(event_target_value(&ev).parse().unwrap_or(0))>
                        <option value="0">"as few as fit"</option>
                        {(1..=8u32).map(|n| view! { <option value=n.to_string()>{n}</option> }).collect_view()}
                    </select>
                </label>
                <NumberInput label="SRAM KiB" testid="esp32-sram" value=sram_kib min=16 max=16 * 1024/>
                <NumberInput label="PSRAM KiB" testid="esp32-psram" value=psram_kib min=64 max=64 * 1024/>
                <label>
                    "link "
                    <select data-testid="esp32-link" on:change=move |ev| link.set(event_target_value(&ev).parse().unwrap_or(921_600))>
                        {LINKS.iter().map(|(b, l)| view! { <option value=b.to_string()>{*l}</option> }).collect_view()}
                    </select>
                </label>
                <NumberInput label="tokens" testid="esp32-tokens" value=tokens min=1 max=256/>
                <label title=move || if connected() { "node processes started by native-host" } else { "no bridge connected" }>
                    <input
                        type="checkbox"
                        data-testid="esp32-on-bridge"
                        prop:disabled=move || !connected()
                        prop:checked=move || on_bridge.get() && connected()
                        on:change=move |ev| on_bridge.set(event_target_checked(&ev))
                    />
                    " nodes on the bridge's host"
                </label>
            </div>
            <label class="wide">
                "prompt "
                <input type="text" data-testid="esp32-prompt" prop:value=move || prompt.get() on:input=move |ev| prompt.set(event_target_value(&ev))/>
            </label>
            <button data-testid="esp32-run" on:click=start prop:disabled=move || ui.busy.get()>
                {move || if ui.busy.get() { "running…" } else { "run on the cluster" }}
            </button>
            <button
                data-testid="esp32-stop"
                prop:disabled=move || !ui.busy.get()
                on:click=move |_| {
                    ui.stop.set(true);
                    if let Some(id) = ui.request.get_untracked() {
                        bridge.cancel(id);
                    }
                }
            >
                "stop"
            </button>
            <p data-testid="esp32-status">{move || ui.status.get()}</p>
            {move || ui.view.with(|v| v.error.clone()).map(|e| view! { <p class="error" data-testid="esp32-error">{e}</p> })}
            <ClusterView view=ui.view/>
            <pre class="generated" data-testid="esp32-text">
                {move || ui.view.with(|v| format!("{}{}", v.prompt, String::from_utf8_lossy(&v.text)))}
            </pre>
            <Summary view=ui.view source=source/>
            <StepView view=ui.view step=ui.step/>
        </section>
    }
}

/// The nodes and links, the blocks each holds, and each node's memory against its budget.
#[component]
fn ClusterView(view: RwSignal<RunView>) -> impl IntoView {
    move || {
        view.with(|v| {
            if v.nodes.is_empty() {
                return ().into_any();
            }
            let place = placement(&v.nodes, v.layers);
            let hue = |i: usize| (i * 97 + 20) % 360;
            view! {
                <div class="esp32-cluster" data-testid="esp32-diagram">
                    <div class="esp32-box host">
                        "coordinator"<br/><small>"embedding and output layer; sends the activation to each node in turn and takes it back"</small>
                    </div>
                    <div class="esp32-link"><small>"one link per node"</small></div>
                    <div class="esp32-nodes">
                        {v.nodes.iter().enumerate().map(|(i, n)| view! { <NodeBox n=n.clone() hue=hue(i)/> }).collect_view()}
                    </div>
                </div>
                <div class="esp32-placement" data-testid="esp32-placement" title="which node holds each block">
                    <small>"blocks "</small>
                    {place
                        .iter()
                        .enumerate()
                        .map(|(b, p)| {
                            let style = p.map(|i| format!("background:hsl({},55%,70%)", hue(i))).unwrap_or_default();
                            view! {
                                <span class="cell" data-testid="esp32-block" data-node=p.map(|i| i.to_string()).unwrap_or_default() style=style>
                                    {b}
                                </span>
                            }
                        })
                        .collect_view()}
                </div>
            }
            .into_any()
        })
    }
}

#[component]
fn NodeBox(n: NodePlan, hue: usize) -> impl IntoView {
    let psram = n.weights + n.kv_cache;
    let bar = |label: &'static str, testid: &'static str, used: u64, budget: u64| {
        let f = fraction(used, budget);
        view! {
            <div class="membar" data-testid=testid data-used=used.to_string() data-budget=budget.to_string()>
                <span class="fill" style=format!("width:{:.1}%", f * 100.0)></span>
                <span class="label">{format!("{label} {} / {}", bytes(used), bytes(budget))}</span>
            </div>
        }
    };
    view! {
        <div class="esp32-box" data-testid="esp32-node" style=format!("border-color:hsl({hue},55%,55%)")>
            <strong>{format!("node {}", n.name)}</strong>
            <div>
                {if n.count == 0 { "no blocks".to_string() } else { format!("blocks {}..{}", n.first, n.first + n.count) }}
                {if n.emulated { " · emulated" } else { "" }}
            </div>
            {bar("PSRAM", "esp32-psram-bar", psram, n.psram_budget)}
            {bar("SRAM", "esp32-sram-bar", n.sram_need, n.sram_budget)}
            <small>
                {format!(
                    "{} MHz · link {} · up to {} rows a forward",
                    n.clock_hz / 1_000_000,
                    if n.link_bps == 0 { "unthrottled".to_string() } else { format!("UART {} baud", n.link_bps) },
                    n.max_rows
                )}
            </small>
        </div>
    }
}

#[component]
fn Summary(view: RwSignal<RunView>, source: RwSignal<usize>) -> impl IntoView {
    move || {
        view.with(|v| {
            v.summary.as_ref().map(|s| {
                // bitnet.cpp's model and prompt, greedy: compare with what llama-cli printed.
                let want = &FIXTURE_GREEDY[..FIXTURE_GREEDY.len() - 2];
                let fixture = Source::ALL.get(source.get_untracked()) == Some(&Source::Fixture) && v.prompt == format!(" {FIXTURE_PROMPT}");
                let matches = fixture.then(|| want.starts_with(&v.text) || v.text.starts_with(want));
                let loaded_s: f64 = v.loaded.iter().map(|l| l.2 as f64 / 1e6).sum();
                view! {
                    <p
                        data-testid="esp32-summary"
                        data-tokens=s.tokens.len().to_string()
                        data-modelled=format!("{:.3}", s.modelled_tok_s)
                        data-wall=format!("{:.3}", s.wall_tok_s)
                        data-matches=matches.map(|m| m.to_string()).unwrap_or_default()
                    >
                        {format!(
                            "{} tokens: modelled {:.2} tok/s on the boards (the link {:.0} % of that time), emulated {:.1} tok/s wall; loading the weights over the modelled links would take {:.0} s{}",
                            s.tokens.len(),
                            s.modelled_tok_s,
                            s.link_share * 100.0,
                            s.wall_tok_s,
                            loaded_s,
                            match matches {
                                Some(true) => " — byte for byte what bitnet.cpp printed on one machine",
                                Some(false) => " — DIFFERS from what bitnet.cpp printed",
                                None => "",
                            }
                        )}
                    </p>
                    <ul class="esp32-reports" data-testid="esp32-reports">
                        {s.nodes
                            .iter()
                            .map(|n| {
                                view! {
                                    <li>
                                        {format!(
                                            "node {} says: {} forwards, {} damaged frames received, {} answers resent; SRAM {} and PSRAM {} in use; modelled {:.1} ms of compute",
                                            n.node,
                                            n.forwards,
                                            n.corrupt_in,
                                            n.resent,
                                            bytes(n.sram_used),
                                            bytes(n.psram_used),
                                            n.modelled_us as f64 / 1e3
                                        )}
                                    </li>
                                }
                            })
                            .collect_view()}
                    </ul>
                }
            })
        })
    }
}

/// One pipeline step on the modelled boards' time axis (the newest, or the one picked).
#[component]
fn StepView(view: RwSignal<RunView>, step: RwSignal<Option<usize>>) -> impl IntoView {
    let count = Memo::new(move |_| view.with(|v| v.steps.len()));
    let shown = Memo::new(move |_| step.get().unwrap_or(count.get().saturating_sub(1)));
    let rates = Signal::derive(move || {
        let (modelled, wall) = view.with(|v| token_rates(&v.steps));
        vec![modelled, wall]
    });
    let spans =
        Signal::derive(move || view.with(|v| v.steps.get(shown.get()).map(|(_, h)| hop_spans(h)).unwrap_or_default()));
    let label = move || {
        view.with(|v| {
            v.steps
                .get(shown.get())
                .map(|(pos, h)| {
                    format!(
                        "step {} of {}: position {pos}, {} rows, modelled on the boards",
                        shown.get() + 1,
                        v.steps.len(),
                        h.first().map_or(0, |h| h.rows)
                    )
                })
                .unwrap_or_default()
        })
    };
    move || {
        (count.get() > 0).then(|| {
            view! {
                <div class="esp32-steps">
                    <label>
                        "pipeline step "
                        <input
                            type="range"
                            min="0"
                            max=move || count.get().saturating_sub(1).to_string()
                            data-testid="esp32-step"
                            prop:value=move || shown.get().to_string()
                            on:input=move |ev| step.set(event_target_value(&ev).parse().ok())
                        />
                        <button on:click=move |_| step.set(None)>"follow the newest"</button>
                    </label>
                    <p>{label}</p>
                    <Timeline spans=spans label="activation out, the node's blocks, activation back — node by node"/>
                    <Show when=move || !rates.with(|r| r[0].is_empty())>
                        <LineChart title="generation speed, step by step" x_label="position" unit="tok/s"
                            series=vec!["modelled on the boards".into(), "emulated here (wall)".into()]
                            lines=rates testid="esp32-speed-chart" />
                    </Show>
                </div>
            }
        })
    }
}

fn finish(ui: Ui, result: Result<(), String>) {
    if let Err(e) = result {
        ui.view.update(|v| v.error = Some(e));
    }
    ui.busy.set(false);
    ui.request.set(None);
}

fn run_in_page(ui: Ui, s: Settings) {
    let t0 = now();
    match InPage::start(&s, &mut |e| ui.view.update(|v| v.apply(e))) {
        Ok(run) => {
            ui.status.set(format!("nodes loaded in this page in {:.0} ms; generating…", now() - t0));
            ui.run.set_value(Some(run));
            tick(ui);
        }
        Err(e) => {
            ui.status.set(String::new());
            finish(ui, Err(e));
        }
    }
}

/// Tokens for one slice, then a repaint.
fn tick(ui: Ui) {
    let t0 = now();
    let mut events = Vec::new();
    if ui.stop.get_untracked() {
        ui.run.set_value(None);
        ui.status.set("stopped; the text above is incomplete".into());
        return finish(ui, Ok(()));
    }
    let r = ui.run.try_update_value(|r| {
        let r = r.as_mut().ok_or("no run")?;
        while !r.done() && now() - t0 < SLICE_MS {
            r.step(&mut |e| events.push(e))?;
        }
        let done = r.done();
        Ok::<_, String>((done, if done { Some(r.summary()?) } else { None }))
    });
    ui.view.update(|v| events.into_iter().for_each(|e| v.apply(e)));
    match r {
        Some(Ok((true, summary))) => {
            ui.view.update(|v| v.summary = summary);
            ui.status.set("done (in this page)".into());
            finish(ui, Ok(()));
        }
        Some(Ok((false, _))) => {
            set_timeout(move || tick(ui), Duration::from_millis(0));
        }
        Some(Err(e)) => finish(ui, Err(e)),
        None => finish(ui, Ok(())),
    }
}

/// `file`: a GGUF file in the bridge's models directory, instead of `s.source`.
fn run_on_bridge(ui: Ui, bridge: Bridge, s: Settings, file: Option<String>) {
    let model = match (file, s.source) {
        (Some(path), _) => Esp32Model::Path { path },
        (None, Source::Fixture) => Esp32Model::Fixture,
        (None, Source::Dummy { size, quant }) => Esp32Model::Dummy { size: size.into(), quant: quant.name().into() },
    };
    let req = Request::Esp32Run(Esp32Run {
        model,
        nodes: s.nodes,
        prompt: s.prompt,
        max_tokens: s.tokens as u32,
        sram: Some(s.budget.sram),
        psram: Some(s.budget.psram),
        link_bps: Some(s.link_bps),
    });
    ui.status.set("the bridge is starting node processes…".into());
    let sent = bridge.request(req, move |m| match m {
        ServerMessage::Event { event: Event::Esp32 { event }, .. } => {
            ui.view.update(|v| v.apply(event.clone()));
            false
        }
        ServerMessage::Result { result: Reply::Esp32Done(s), .. } => {
            ui.view.update(|v| v.summary = Some(s.clone()));
            ui.status.set("done (node processes on the bridge's host)".into());
            finish(ui, Ok(()));
            true
        }
        ServerMessage::Error(e) => {
            finish(ui, Err(e.message.clone()));
            true
        }
        _ => false,
    });
    match sent {
        Ok(id) => ui.request.set(Some(id)),
        Err(e) => finish(ui, Err(e)),
    }
}
