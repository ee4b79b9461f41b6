//! A whole BitNet model generating text in this tab: bitnet.cpp's tiny model or a dummy layout
//! built here, one token at a time on the page's thread, with tokens per second.

use crate::components::{LineChart, NumberInput};
use crate::logic::bitnet_model::{build, Demo, Generation, Source, FIXTURE_PROMPT};
use kernels_wasm::bitnet::backend::Backend;
use leptos::prelude::*;
use std::time::Duration;

/// bitnet.cpp's greedy output for the fixture prompt (and llama-cli's two closing newlines).
const FIXTURE_GREEDY: &[u8] = include_bytes!("../../../../assets/fixtures/bitnet-cpp/greedy-32.bin");
/// Each slice of generation runs this long before the page gets to repaint.
const SLICE_MS: f64 = 50.0;

#[derive(Clone, Copy)]
struct Ui {
    busy: RwSignal<bool>,
    status: RwSignal<String>,
    text: RwSignal<String>,
    stats: RwSignal<Option<Stats>>,
    demo: StoredValue<Option<(usize, Demo)>>,
    gen: StoredValue<Option<Generation>>,
}

#[derive(Clone, PartialEq)]
struct Stats {
    prompt_tokens: usize,
    tokens: usize,
    prompt_ms: f64,
    tps: f64,
    done: bool,
    /// For bitnet.cpp's model at temperature 0: whether the bytes so far are its bytes.
    matches: Option<bool>,
    /// Per generated token: (number, tok/s).
    rates: Vec<(f64, f64)>,
}

fn now() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}

#[component]
pub fn ModelRun() -> impl IntoView {
    let source = RwSignal::new(0usize);
    let prompt = RwSignal::new(FIXTURE_PROMPT.to_string());
    let n = RwSignal::new(32usize);
    let temp = RwSignal::new(0.0f32);
    let backend = RwSignal::new(Backend::best());
    let ui = Ui {
        busy: RwSignal::new(false),
        status: RwSignal::new(String::new()),
        text: RwSignal::new(String::new()),
        stats: RwSignal::new(None),
        demo: StoredValue::new(None),
        gen: StoredValue::new(None),
    };
    let start = move |_| {
        if ui.busy.get_untracked() {
            return;
        }
        ui.busy.set(true);
        ui.stats.set(None);
        ui.text.set(String::new());
        let (src, p, t, b, limit) = (
            source.get_untracked(),
            prompt.get_untracked(),
            temp.get_untracked(),
            backend.get_untracked(),
            n.get_untracked(),
        );
        let built = ui.demo.with_value(|d| d.as_ref().map(|(s, _)| *s)) == Some(src);
        ui.status.set(if built { "generating…".into() } else { "building the model in this tab…".into() });
        set_timeout(
            move || {
                if !built {
                    let t0 = now();
                    match build(Source::ALL[src], 1) {
                        Ok(d) => {
                            let c = &d.model.config;
                            ui.status.set(format!(
                                "{}: {} layers, dim {}, vocab {}, {:.1} M ternary weights, {:.1} MB in memory, built in {:.0} ms",
                                Source::ALL[src].label(),
                                c.layers,
                                c.dim,
                                c.vocab,
                                c.ternary_weights() as f64 / 1e6,
                                d.file_bytes as f64 / 1e6,
                                now() - t0
                            ));
                            ui.demo.set_value(Some((src, d)));
                        }
                        Err(e) => {
                            ui.status.set(format!("cannot build the model: {e}"));
                            ui.busy.set(false);
                            return;
                        }
                    }
                }
                let started = ui.demo.try_update_value(|d| {
                    let (_, d) = d.as_mut().ok_or("no model")?;
                    d.start(&p, t, 1, b, &mut now)
                });
                match started {
                    Some(Ok(g)) => {
                        ui.gen.set_value(Some(g));
                        tick(ui, src, t, b, limit);
                    }
                    Some(Err(e)) => {
                        ui.status.set(e);
                        ui.busy.set(false);
                    }
                    None => ui.busy.set(false),
                }
            },
            Duration::from_millis(30),
        );
    };
    view! {
        <div class="demo" data-testid="bitnet-model">
            <h3>"A whole model in this tab"</h3>
            <p>
                "bitnet.cpp's "<code>"bitnet"</code>" architecture with the kernels above, the KV cache and the F16 output layer in WebAssembly, one token at a time. "
                "It runs on this tab's one thread: threads in wasm need SharedArrayBuffer, which browsers grant only to cross-origin-isolated pages (COOP/COEP headers that "
                <code>"trunk serve"</code>" does not send) and a wasm build with atomics (nightly build-std), so there are no Web Workers here."
            </p>
            <div class="controls">
                <label>
                    "model "
                    <select
                        data-testid="bitnet-model-source"
                        prop:disabled=move || ui.busy.get()
                        on:change=move |ev| source.set(event_target_value(&ev).parse().unwrap_or(0))
                    >
                        {Source::ALL
                            .iter()
                            .enumerate()
                            .map(|(i, s)| view! { <option value=i.to_string()>{s.label()}</option> })
                            .collect_view()}
                    </select>
                </label>
                <label>
                    "kernels "
                    <select
                        data-testid="bitnet-model-backend"
                        on:change=move |ev| {
                            if let Some(b) = Backend::available().into_iter().find(|b| b.name() == event_target_value(&ev)) {
                                backend.set(b);
                            }
                        }
                    >
                        {Backend::available()
                            .into_iter()
                            .rev()
                            .map(|b| view! { <option value=b.name()>{b.name()}</option> })
                            .collect_view()}
                    </select>
                </label>
                <NumberInput label="tokens" testid="bitnet-model-n" value=n min=1 max=256/>
                <NumberInput label="temperature" testid="bitnet-model-temp" value=temp min=0.0 max=5.0 step="0.1"/>
            </div>
            <label class="wide">
                "prompt "
                <input
                    type="text"
                    data-testid="bitnet-model-prompt"
                    prop:value=move || prompt.get()
                    on:input=move |ev| prompt.set(event_target_value(&ev))
                />
            </label>
            <button data-testid="bitnet-model-run" on:click=start prop:disabled=move || ui.busy.get()>
                {move || if ui.busy.get() { "running…" } else { "generate" }}
            </button>
            <p data-testid="bitnet-model-status">{move || ui.status.get()}</p>
            <pre class="generated" data-testid="bitnet-model-text">{move || ui.text.get()}</pre>
            <Show when=move || ui.stats.with(|s| s.as_ref().is_some_and(|s| !s.rates.is_empty()))>
                <LineChart title="generation speed, token by token" x_label="generated token" unit="tok/s"
                    series=vec!["this tab's forward pass per token".into()] testid="bitnet-model-chart"
                    lines=Signal::derive(move || vec![ui.stats.with(|s| s.as_ref().map(|s| s.rates.clone()).unwrap_or_default())]) />
            </Show>
            {move || {
                ui.stats
                    .get()
                    .map(|s| {
                        view! {
                            <p
                                data-testid="bitnet-model-stats"
                                data-done=s.done.to_string()
                                data-tokens=s.tokens.to_string()
                                data-tps=format!("{:.2}", s.tps)
                                data-matches=s.matches.map(|m| m.to_string()).unwrap_or_default()
                            >
                                {format!(
                                    "prompt {} tokens in {:.0} ms; {} tokens generated at {:.1} tok/s{}",
                                    s.prompt_tokens,
                                    s.prompt_ms,
                                    s.tokens,
                                    s.tps,
                                    match s.matches {
                                        Some(true) => " — byte for byte what bitnet.cpp printed",
                                        Some(false) => " — DIFFERS from what bitnet.cpp printed",
                                        None => "",
                                    },
                                )}
                            </p>
                        }
                    })
            }}
        </div>
    }
}

/// Generates for one slice, shows the text, and schedules the next slice until done.
fn tick(ui: Ui, src: usize, temp: f32, backend: Backend, limit: usize) {
    let t0 = now();
    let result: Option<Result<(), String>> = ui.demo.try_update_value(|d| {
        let (_, d) = d.as_mut().ok_or("no model")?;
        ui.gen
            .try_update_value(|g| {
                let g = g.as_mut().ok_or("no generation")?;
                while !g.done && g.tokens.len() < limit && now() - t0 < SLICE_MS {
                    d.step(g, backend, &mut now)?;
                }
                if g.tokens.len() >= limit {
                    g.done = true;
                }
                Ok(())
            })
            .unwrap_or(Ok(()))
    });
    let stats = ui.gen.with_value(|g| {
        g.as_ref().map(|g| {
            // bitnet.cpp's model, its prompt, greedy: compare with what llama-cli printed.
            let generated = g.text.get(1 + FIXTURE_PROMPT.len()..).unwrap_or_default();
            let want = &FIXTURE_GREEDY[..FIXTURE_GREEDY.len() - 2];
            let fixture_run = Source::ALL[src] == Source::Fixture
                && temp == 0.0
                && g.text.starts_with(format!(" {FIXTURE_PROMPT}").as_bytes());
            let matches = fixture_run.then(|| want.starts_with(generated) || generated.starts_with(want));
            ui.text.set(String::from_utf8_lossy(&g.text).into_owned());
            Stats {
                prompt_tokens: g.prompt_tokens,
                tokens: g.tokens.len(),
                prompt_ms: g.prompt_ms,
                tps: g.tokens_per_s(),
                done: g.done,
                matches,
                rates: g.rate_by_token(),
            }
        })
    });
    ui.stats.set(stats.clone());
    match result {
        Some(Err(e)) => {
            ui.status.set(e);
            ui.busy.set(false);
        }
        _ if stats.is_some_and(|s| !s.done) => {
            set_timeout(move || tick(ui, src, temp, backend, limit), Duration::from_millis(0));
        }
        _ => ui.busy.set(false),
    }
}
