//! The eBPF tab: a Qwen3-family or llama forward pass (the real SmolLM2 by default) running in BPF
//! programs inside the host's kernel, driven through the bridge. Tokens stream in as the kernel
//! chooses them; each position's BPF calls are shown on a timeline, summed per operator, beside
//! the verifier's statistics.

use crate::bridge::Bridge;
use crate::components::{BarChart, NumberInput, Timeline};
use crate::link::PageLink;
use crate::logic::ebpf::{architecture, model_choices, op_totals, parse_ids, timeline_spans, token_label, TINY_RANDOM};
use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt, TopLogit, TraceSpan, VerifierStat};
use kernels_wasm::protocol::{Event, Reply, Request, RequestId, ServerMessage};
use leptos::prelude::*;

#[derive(Debug, Clone, PartialEq)]
struct TokenRow {
    pos: u32,
    token: u32,
    text: String,
    prompt: bool,
    top: Vec<TopLogit>,
    reference_top: Vec<TopLogit>,
    seconds: f64,
    calls: u32,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct RunView {
    running: Option<RequestId>,
    /// What the bridge loaded, and the prompt's ids with their text.
    model: String,
    prompt: Vec<(u32, String)>,
    tokens: Vec<TokenRow>,
    traces: Vec<Vec<TraceSpan>>,
    verifier: Vec<VerifierStat>,
    done: Option<(f64, f64)>,
    error: Option<String>,
}

#[component]
pub fn EbpfTab() -> impl IntoView {
    let bridge = expect_context::<Bridge>();
    let host = move || {
        bridge.status.with(|s| match s.hello() {
            Some(h) if h.capabilities.ebpf.available => {
                format!("This host can load BPF programs: {}", h.capabilities.ebpf.detail)
            }
            Some(h) => format!("This host cannot load BPF programs: {}", h.capabilities.ebpf.detail),
            None => "No bridge connected: this tab needs native-host (cargo xtask serve).".to_string(),
        })
    };
    // The models the bridge offers (GGUF files and model directories), the real one first.
    let link = PageLink::get();
    let models = RwSignal::new(vec![TINY_RANDOM.to_string()]);
    let model = RwSignal::new(TINY_RANDOM.to_string());
    // The list arrives after the page shows; it picks the default only until the user has chosen.
    let (listed, picked) = (RwSignal::new(false), RwSignal::new(false));
    Effect::new(move |_| {
        if bridge.status.with(|s| s.hello().is_some()) {
            let _ = bridge.request(Request::ListModels, move |m| {
                if let ServerMessage::Result { result: Reply::Models { models: entries }, .. } = m {
                    let choices = model_choices(entries);
                    if !picked.get_untracked() {
                        // The link's model (model=…), once the list can say whether it is there.
                        let wanted = link.raw("model").filter(|w| {
                            let offered = choices.contains(w);
                            if !offered {
                                link.note(format!(
                                    "the link's model={w:?} is not among the bridge's models; showing {}",
                                    choices[0]
                                ));
                            }
                            offered
                        });
                        model.set(wanted.unwrap_or_else(|| choices[0].clone()));
                    }
                    models.set(choices);
                    listed.set(true);
                }
                true
            });
        }
    });
    let tiny = move || model.with(|m| m == TINY_RANDOM);
    let text = RwSignal::new("What is the capital of France?".to_string());
    let chat = RwSignal::new(true);
    let ids = RwSignal::new("7, 300, 12".to_string());
    let max_tokens = RwSignal::new(16u32);
    let seed = RwSignal::new(1u64);
    let threads = RwSignal::new(2u32);
    let view_state = RwSignal::new(RunView::default());
    let selected = RwSignal::new(0usize);

    let start = move |_| {
        selected.set(0);
        let prompt = if tiny() {
            match parse_ids(&ids.get_untracked()) {
                Ok(ids) => EbpfPrompt::Ids { ids },
                Err(e) => return view_state.set(RunView { error: Some(e), ..RunView::default() }),
            }
        } else {
            EbpfPrompt::Text { text: text.get_untracked(), chat: chat.get_untracked() }
        };
        let request = Request::EbpfRun {
            model: if tiny() {
                EbpfModel::TinyRandom { seed: seed.get_untracked() }
            } else {
                EbpfModel::Path { path: model.get_untracked() }
            },
            prompt,
            max_tokens: max_tokens.get_untracked(),
            threads: threads.get_untracked(),
        };
        view_state.set(RunView::default());
        let sent = bridge.request(request, move |m| {
            let mut finished = false;
            view_state.update(|v| match m {
                ServerMessage::Event { event: Event::EbpfVerifier { programs }, .. } => v.verifier = programs.clone(),
                ServerMessage::Event { event: Event::EbpfPrompt { model, ids, pieces }, .. } => {
                    v.model = model.clone();
                    v.prompt = ids
                        .iter()
                        .copied()
                        .zip(pieces.iter().cloned().chain(std::iter::repeat(String::new())))
                        .collect();
                }
                ServerMessage::Event {
                    event: Event::EbpfToken { pos, token, prompt, top, reference_top, seconds, calls, text },
                    ..
                } => v.tokens.push(TokenRow {
                    pos: *pos,
                    token: *token,
                    text: text.clone(),
                    prompt: *prompt,
                    top: top.clone(),
                    reference_top: reference_top.clone(),
                    seconds: *seconds,
                    calls: *calls,
                }),
                ServerMessage::Event { event: Event::EbpfTrace { spans, .. }, .. } => v.traces.push(spans.clone()),
                ServerMessage::Result {
                    result: Reply::EbpfDone { seconds_per_token, calls_per_token, .. }, ..
                } => {
                    v.done = Some((*seconds_per_token, *calls_per_token));
                    v.running = None;
                    finished = true;
                }
                ServerMessage::Error(e) => {
                    v.error = Some(format!("{:?}: {}", e.code, e.message));
                    v.running = None;
                    finished = true;
                }
                _ => {}
            });
            if let Some(last) = view_state.with_untracked(|v| v.traces.len().checked_sub(1)) {
                selected.set(last);
            }
            finished
        });
        match sent {
            Ok(id) => view_state.update(|v| v.running = Some(id)),
            Err(e) => view_state.update(|v| v.error = Some(e)),
        }
    };
    let cancel = move |_| {
        if let Some(id) = view_state.with_untracked(|v| v.running) {
            bridge.cancel(id);
        }
    };

    let spans = Signal::derive(move || {
        view_state.with(|v| v.traces.get(selected.get()).map(|t| timeline_spans(t)).unwrap_or_default())
    });
    let tokens = move || {
        view_state.with(|v| {
            v.tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let title = format!(
                        "position {}: token {}, {:.1} ms, {} BPF calls; top-5 {}",
                        t.pos,
                        t.token,
                        t.seconds * 1e3,
                        t.calls,
                        t.top.iter().map(|l| format!("{}:{:.3}", l.token, l.logit)).collect::<Vec<_>>().join(" ")
                    );
                    view! {
                        <button
                            class="token"
                            class:prompt=t.prompt
                            class:current=move || selected.get() == i
                            data-testid="ebpf-token"
                            data-prompt=t.prompt.to_string()
                            title=title
                            on:click=move |_| selected.set(i)
                        >
                            {token_label(&t.text, t.token)}
                        </button>
                    }
                })
                .collect_view()
        })
    };
    let totals = move || {
        view_state.with(|v| {
            op_totals(v.traces.iter().map(|t| t.as_slice()))
                .into_iter()
                .map(|t| {
                    view! {
                        <tr data-testid="ebpf-op-total">
                            <td>{t.op}</td>
                            <td class="num">{t.calls}</td>
                            <td class="num">{format!("{:.2}", t.kernel_ns as f64 / 1e6)}</td>
                            <td class="num">{format!("{:.2}", t.wall_ns as f64 / 1e6)}</td>
                        </tr>
                    }
                })
                .collect_view()
        })
    };
    // The same totals as bars: time in the kernel and wall time per operator, in ms.
    let op_bars = Signal::derive(move || {
        view_state.with(|v| {
            op_totals(v.traces.iter().map(|t| t.as_slice()))
                .into_iter()
                .map(|t| (t.op, vec![Some(t.kernel_ns as f64 / 1e6), Some(t.wall_ns as f64 / 1e6)]))
                .collect::<Vec<_>>()
        })
    });
    let verifier = move || {
        view_state.with(|v| {
            v.verifier
                .iter()
                .map(|s| view! { <tr data-testid="ebpf-verifier"><td>{s.program.clone()}</td><td class="num">{s.instructions}</td></tr> })
                .collect_view()
        })
    };
    let top = move || {
        view_state.with(|v| {
            v.tokens.get(selected.get()).map(|t| {
                t.top
                    .iter()
                    .zip(t.reference_top.iter())
                    .map(|(k, r)| {
                        view! {
                            <tr data-testid="ebpf-top-row">
                                <td>{k.token}</td>
                                <td class="num">{format!("{:.4}", k.logit)}</td>
                                <td>{r.token}</td>
                                <td class="num">{format!("{:.4}", r.logit)}</td>
                            </tr>
                        }
                    })
                    .collect_view()
            })
        })
    };
    let summary = move || {
        view_state.with(|v| match (&v.error, v.done, v.running) {
            (Some(e), _, _) => e.clone(),
            (None, Some((spt, cpt)), _) => format!(
                "done: {} positions of {}, {:.2} ms/token, {:.0} BPF calls/token — every multiply ran in the kernel",
                v.tokens.len(),
                v.model,
                spt * 1e3,
                cpt
            ),
            (None, None, Some(_)) if v.model.is_empty() => "loading the model into the kernel…".into(),
            (None, None, Some(_)) => format!("running {} in the kernel… {} positions so far", v.model, v.tokens.len()),
            _ => "not run yet".into(),
        })
    };

    view! {
        <section class="ebpf" data-testid="ebpf-tab">
            <h2 data-testid="ebpf-heading">
                {move || {
                    let arch = view_state.with(|v| model.with(|m| architecture(m, &v.model)));
                    format!("qwen3-ebpf: a {arch} forward pass in verified eBPF programs")
                }}
            </h2>
            <p class="host-capability" data-testid="ebpf-host">{host}</p>
            <p class="lede">
                "Every matrix product, norm, RoPE and attention step runs as a BPF program inside the host's Linux kernel "
                "(BPF_PROG_TEST_RUN), in Q16/Q24 fixed point, bit-identical to the Rust golden model. The default model is "
                "SmolLM2-135M-Instruct (a real llama-architecture model, GGUF); the tiny random Qwen3 is there for quick "
                "runs, but its tokens are not language."
            </p>
            <div class="controls">
                <label>
                    "model "
                    <select data-testid="ebpf-model" data-loaded=move || listed.get().to_string()
                        on:change=move |ev| {
                            picked.set(true);
                            model.set(event_target_value(&ev));
                            link.set("model", &model.get_untracked());
                        }>
                        {move || models.get().into_iter().map(|m| {
                            let is = model.get() == m;
                            view! { <option value=m.clone() selected=is>{m.clone()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <Show when=move || !tiny()>
                    <label>
                        "prompt "
                        <input data-testid="ebpf-text" size="40" prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev)) />
                    </label>
                    <label>
                        <input type="checkbox" data-testid="ebpf-chat" prop:checked=move || chat.get()
                            on:change=move |ev| chat.set(event_target_checked(&ev)) />
                        " chat"
                    </label>
                </Show>
                <Show when=tiny>
                    <label>
                        "prompt token ids "
                        <input data-testid="ebpf-ids" prop:value=move || ids.get() on:input=move |ev| ids.set(event_target_value(&ev)) />
                    </label>
                    <NumberInput label="seed" value=seed min=0 max=u64::MAX/>
                </Show>
                <NumberInput label="tokens" testid="ebpf-n" value=max_tokens min=1 max=512/>
                <label>
                    "threads "
                    <select on:change=move |ev| threads.set(if event_target_value(&ev) == "1" { 1 } else { 2 })>
                        <option value="2">"2"</option>
                        <option value="1">"1"</option>
                    </select>
                </label>
                <button data-testid="ebpf-run" on:click=start disabled=move || view_state.with(|v| v.running.is_some())>
                    "run in the kernel"
                </button>
                <button data-testid="ebpf-cancel" on:click=cancel disabled=move || view_state.with(|v| v.running.is_none())>
                    "cancel"
                </button>
            </div>
            <p data-testid="ebpf-summary">{summary}</p>
            <p class="prompt-pieces" data-testid="ebpf-prompt">
                {move || view_state.with(|v| v.prompt.iter().map(|(id, piece)| {
                    view! { <span class="piece" title=format!("token {id}")>{token_label(piece, *id)}</span> }
                }).collect_view())}
            </p>
            <div class="tokens" data-testid="ebpf-tokens">{tokens}</div>
            <div class="demo">
                <h3>{move || format!("BPF calls of position {}", selected.get())}</h3>
                <Timeline spans=spans label="each BPF call of this token, wall time" />
                <table class="outputs" data-testid="ebpf-top">
                    <thead>
                        <tr>
                            <th>"kernel token"</th>
                            <th>"logit"</th>
                            <th>"f32 reference token"</th>
                            <th>"logit"</th>
                        </tr>
                    </thead>
                    <tbody>{top}</tbody>
                </table>
            </div>
            <div class="row">
                <div class="demo">
                    <h3>"per operator, whole run"</h3>
                    <BarChart title="time per operator, whole run" unit="ms" testid="ebpf-op-chart"
                        series=vec!["in BPF programs (kernel)".into(), "wall, with the calls".into()] groups=op_bars />
                    <table class="outputs">
                        <thead><tr><th>"operator"</th><th>"calls"</th><th>"kernel ms"</th><th>"wall ms"</th></tr></thead>
                        <tbody>{totals}</tbody>
                    </table>
                </div>
                <div class="demo">
                    <h3>"verifier: instructions processed"</h3>
                    <table class="outputs">
                        <tbody>{verifier}</tbody>
                    </table>
                </div>
            </div>
        </section>
    }
}
