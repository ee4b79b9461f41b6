//! The qwenGPU tab's conversation panel: a chat with the second machine spliced into a language
//! model, run by the bridge (`qwengpu_chat`). A turn is text, `/run NAME` or `/cuda …`; the
//! panel shows the host's tokens and the model's apart, each launch's steps as the model
//! generates their VAL tokens, the arrays, the reply, and the machine's DeltaNet rows decoded.

use crate::bridge::Bridge;
use crate::components::virtual_table::CellFn;
use crate::components::{Heatmap, VirtualTable};
use crate::logic::qwengpu_chat::{chat_models, step_line, token_class, ChatView, LaunchView, TINY_LLAMA};
use kernels_wasm::protocol::qwengpu::{ChatModel, ChatToken, ChatTurn, TokenKind};
use kernels_wasm::protocol::{Event, Reply, Request, RequestId, ServerMessage};
use leptos::prelude::*;
use std::sync::Arc;

/// Chips of a launch's steps drawn in a turn; the step table holds every one.
const STEP_CHIPS: usize = 24;
const LANES: usize = 4;

fn chip(t: &ChatToken) -> impl IntoView {
    // Text with its whitespace made visible; a machine token as it is written out.
    let label = match t.kind {
        TokenKind::Text => t.text.replace(' ', "\u{2423}").replace('\n', "\u{21b5}"),
        _ => t.text.trim_start_matches("VAL ").to_string(),
    };
    view! { <span class=token_class(t) title=format!("id {} ({:?}, {:?})", t.id, t.kind, t.by)>{label}</span> }
}

fn launch_summary(l: &LaunchView) -> String {
    match &l.end {
        None => format!(
            "{}: {} ROM blocks, a prompt of {} tokens; {} steps so far",
            l.name,
            l.blocks,
            l.prompt,
            l.steps.len()
        ),
        Some(e) => format!(
            "{}: {} steps, {} tokens ({} records and VAL tokens chosen by the model's argmax, the last its end record: {}){}",
            l.name,
            e.steps,
            e.tokens,
            e.chosen,
            e.end.text,
            match e.suite {
                Some(true) => "; the arrays are the suite's plain Rust ones",
                Some(false) => "; the arrays DIFFER from the suite's plain Rust ones",
                None => "",
            }
        ),
    }
}

#[component]
pub fn ChatPanel(#[prop(into)] kernel: Signal<&'static str>) -> impl IntoView {
    let bridge = expect_context::<Bridge>();
    let connected = move || bridge.status.with(|s| s.hello().is_some());
    let models = RwSignal::new(vec![TINY_LLAMA.to_string()]);
    let model = RwSignal::new(TINY_LLAMA.to_string());
    let listed = RwSignal::new(false);
    Effect::new(move |_| {
        if connected() {
            let _ = bridge.request(Request::ListModels, move |m| {
                if let ServerMessage::Result { result: Reply::Models { models: entries }, .. } = m {
                    let choices = chat_models(entries);
                    model.set(choices[0].clone());
                    models.set(choices);
                    listed.set(true);
                }
                true
            });
        }
    });
    let turn = RwSignal::new(String::new());
    let max_tokens = RwSignal::new(48u32);
    let state = RwSignal::new(ChatView::default());
    let running = RwSignal::new(None::<RequestId>);
    // A conversation is named by the page; a new name (or another model) starts afresh.
    let conversation = RwSignal::new(js_sys::Date::now() as u64);
    let status = RwSignal::new(String::new());

    let send = move |_| {
        let said = turn.get_untracked();
        if said.trim().is_empty() || running.get_untracked().is_some() {
            return;
        }
        let chosen = model.get_untracked();
        let request = Request::QwengpuChat(ChatTurn {
            conversation: conversation.get_untracked(),
            model: if chosen == TINY_LLAMA {
                ChatModel::TinyRandom { seed: 3 }
            } else {
                ChatModel::Path { path: chosen }
            },
            turn: said.clone(),
            max_tokens: max_tokens.get_untracked(),
            max_steps: 100_000,
        });
        state.update(|v| v.begin(&said));
        status.set("sent".into());
        let sent = bridge.request(request, move |m| {
            let mut finished = true;
            match m {
                ServerMessage::Event { event: Event::QwengpuChat { event }, .. } => {
                    state.update(|v| v.apply(event));
                    finished = false;
                }
                ServerMessage::Event { event: Event::Log { line }, .. } => {
                    status.set(line.clone());
                    finished = false;
                }
                ServerMessage::Result { result: Reply::QwengpuChatDone(done), .. } => {
                    state.update(|v| v.finish(Ok(done.position)));
                    status.set(format!("done: {} positions in the context", done.position));
                }
                ServerMessage::Error(e) => {
                    state.update(|v| v.finish(Err(format!("{:?}: {}", e.code, e.message))));
                    status.set(format!("{:?}: {}", e.code, e.message));
                }
                _ => finished = false,
            }
            if finished {
                running.set(None);
            }
            finished
        });
        match sent {
            Ok(id) => {
                running.set(Some(id));
                turn.set(String::new());
            }
            Err(e) => {
                state.update(|v| v.finish(Err(e.clone())));
                status.set(e);
            }
        }
    };
    let stop = move |_| {
        if let Some(id) = running.get_untracked() {
            bridge.cancel(id);
        }
    };
    let fresh = move |_| {
        conversation.set(js_sys::Date::now() as u64);
        state.set(ChatView::default());
        status.set("a new conversation starts with the next turn".into());
    };

    let turns = move || {
        state.with(|v| {
            v.turns
                .iter()
                .map(|t| {
                    let steps = t.launch.as_ref().map(|l| {
                        let chips = l
                            .steps
                            .iter()
                            .take(STEP_CHIPS)
                            .map(|s| {
                                let record = format!("w{} b{} m{:04b}", s.warp, s.block, s.mask);
                                view! {
                                    <span class="tok record" title=step_line(s, LANES)>{record}</span>
                                    {s.vals.iter().map(chip).collect_view()}
                                }
                            })
                            .collect_view();
                        let more = l.steps.len().saturating_sub(STEP_CHIPS);
                        view! {
                            <div class="tokens" data-testid="qwengpu-chat-launch">
                                <span class="tok prompt">{format!("prompt: {} tokens", l.prompt)}</span>
                                {chips}
                                {(more > 0).then(|| view! { <span class="tok more">{format!("… {more} more steps")}</span> })}
                            </div>
                            <p data-testid="qwengpu-chat-launch-summary">{launch_summary(l)}</p>
                        }
                    });
                    let end = match &t.end {
                        Some(Err(e)) => Some(view! { <p class="error" data-testid="qwengpu-chat-error">{e.clone()}</p> }),
                        _ => None,
                    };
                    view! {
                        <li class="turn" data-testid="qwengpu-chat-turn-view">
                            <p class="said"><b>"you: "</b>{t.said.clone()}</p>
                            <div class="tokens">{t.fed.iter().filter(|c| !c.text.is_empty()).take(64).map(chip).collect_view()}</div>
                            {steps}
                            {t.arrays_said.clone().map(|a| view! { <p class="arrays" data-testid="qwengpu-chat-arrays">{a}</p> })}
                            <div class="tokens" data-testid="qwengpu-chat-reply-tokens">{t.reply.iter().map(chip).collect_view()}</div>
                            <p class="reply"><b>"model: "</b><span data-testid="qwengpu-chat-reply">{t.reply_text()}</span></p>
                            {end}
                        </li>
                    }
                })
                .collect_view()
        })
    };
    // Every step of the latest launch, as many as it took.
    let latest = move || state.with(|v| v.turns.iter().rev().find_map(|t| t.launch.clone()));
    let step_rows = Signal::derive(move || latest().map_or(0, |l| l.steps.len()));
    let cell: CellFn = Arc::new(move |row, col| {
        state.with_untracked(|v| {
            let l = v.turns.iter().rev().find_map(|t| t.launch.as_ref());
            let Some(s) = l.and_then(|l| l.steps.get(row)) else { return String::new() };
            match col {
                0 => s.step.to_string(),
                1 => s.warp.to_string(),
                2 => s.block.to_string(),
                3 => (0..LANES).map(|l| if s.mask & (1 << l) != 0 { '■' } else { '□' }).collect(),
                _ => s.vals.iter().map(|t| t.text.trim_start_matches("VAL ")).collect::<Vec<_>>().join(" "),
            }
        })
    });
    let registers = move || {
        state.with(|v| {
            v.rows.as_ref().map(|rows| {
                rows.registers
                    .iter()
                    .map(|r| {
                        let cells = r.values.iter().map(|v| {
                            let text = v.map_or("✗".to_string(), |v| (v as i32).to_string());
                            view! { <td class="num">{text}</td> }
                        });
                        let pc = match r.pc {
                            None => "✗".to_string(),
                            Some(64) => "exited".to_string(),
                            Some(pc) => format!("b{pc}"),
                        };
                        view! {
                            <tr data-testid="qwengpu-chat-row">
                                <th>{format!("warp {} lane {}", r.warp, r.lane)}</th>
                                <td class="num" data-testid="qwengpu-chat-pc">{pc}</td>
                                {cells.collect_view()}
                            </tr>
                        }
                    })
                    .collect_view()
            })
        })
    };
    let rows_caption = move || {
        state.with(|v| match &v.rows {
            None => "no launch yet".to_string(),
            Some(r) => format!(
                "each lane's PC as the PC rows hold them (compiled layer {}: the model reads each next record from them), registers as the register file's rows hold them (layer {}); global memory from the load mixer's rows (layer {})",
                r.pc_layer, r.register_layer, r.memory_layer
            ),
        })
    };
    let memory = Signal::derive(move || {
        state.with(|v| {
            let words = v.rows.as_ref().map(|r| r.memory.clone()).unwrap_or_default();
            (0..126).map(|i| words.get(i).copied().flatten().map_or(0.0, |w| w as i32 as f32)).collect()
        })
    });

    view! {
        <div class="demo" data-testid="qwengpu-chat">
            <h3>"A conversation with the machine inside a language model (through the bridge)"</h3>
            <p class="lede">
                "The second machine spliced in front of a language model's own layers (SmolLM2-135M-Instruct where the "
                "bridge has it; a tiny random llama needs no download and writes noise as text). The host feeds your turn, "
                "a launch's program image and inputs; the model's argmax picks every step's record, every VAL token (a "
                "register half, a store), the launch's end and every word of its reply. Host tokens are grey, the model's blue, records amber."
            </p>
            <div class="controls">
                <label>
                    "model "
                    <select data-testid="qwengpu-chat-model" data-loaded=move || listed.get().to_string()
                        on:change=move |ev| model.set(event_target_value(&ev))>
                        {move || models.get().into_iter().map(|m| {
                            let selected = model.get_untracked() == m;
                            view! { <option value=m.clone() selected=selected>{m.clone()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <label>
                    " reply tokens "
                    <input type="number" min="1" max="512" data-testid="qwengpu-chat-max" prop:value=move || max_tokens.get().to_string()
                        on:change=move |ev| if let Ok(n) = event_target_value(&ev).parse() { max_tokens.set(n) } />
                </label>
                <button data-testid="qwengpu-chat-run-kernel" on:click=move |_| turn.set(format!("/run {}", kernel.get_untracked()))>
                    {move || format!("ask to run {}", kernel.get())}
                </button>
                <button data-testid="qwengpu-chat-new" on:click=fresh>"new conversation"</button>
            </div>
            <textarea data-testid="qwengpu-chat-turn" rows="3" cols="70"
                placeholder="text, /run NAME, or /cuda --block 4 --arg [1,2,3,4] (then the CUDA source on the lines after)"
                prop:value=move || turn.get() on:input=move |ev| turn.set(event_target_value(&ev))></textarea>
            <div>
                <button data-testid="qwengpu-chat-send" on:click=send
                    prop:disabled=move || !connected() || running.get().is_some()>"send"</button>
                <button data-testid="qwengpu-chat-stop" on:click=stop prop:disabled=move || running.get().is_none()>"stop"</button>
                " "
                <span data-testid="qwengpu-chat-status">{move || if connected() {
                    status.get()
                } else {
                    "no bridge connected: the conversation runs in native-host (cargo xtask serve)".to_string()
                }}</span>
            </div>
            <p data-testid="qwengpu-chat-model-loaded">{move || state.with(|v| v.model.clone())}</p>
            <ol class="chat" data-testid="qwengpu-chat-turns">{turns}</ol>
            <h4>"the latest launch, step by step (the record and the VAL tokens, all chosen by the model)"</h4>
            <VirtualTable columns=vec!["step", "warp", "block", "lanes", "VAL tokens (16-bit)"] rows=step_rows cell=cell
                widths="4rem 3.5rem 3.5rem 4.5rem 1fr" />
            <div class="row">
                <table class="outputs registers" data-testid="qwengpu-chat-rows">
                    <caption>{rows_caption}</caption>
                    <thead>
                        <tr>
                            <th></th>
                            <th>"PC"</th>
                            {move || {
                                let regs = state.with(|v| v.rows.as_ref().and_then(|r| r.registers.first()).map_or(0, |r| r.values.len()));
                                (0..regs).map(|r| view! { <th>{format!("r{r}")}</th> }).collect_view()
                            }}
                        </tr>
                    </thead>
                    <tbody>{registers}</tbody>
                </table>
                <Heatmap rows=9 cols=14 values=memory label="global memory, decoded from DeltaNet rows" width=420 />
            </div>
        </div>
    }
}
