//! The qwenGPU tab: a CUDA kernel of the suite, its PTX (editable), the machine's ROM blocks the
//! PTX lowers to, and a run on the reference interpreter stepped one warp-block at a time:
//! which lanes ran, the warp's registers and SIMT stack, and global memory. All in this page.

use crate::bridge::Bridge;
use crate::components::{BarChart, Heatmap, StepControls};
use crate::link::PageLink;
use crate::logic::plot::Rates;
use crate::logic::qwengpu::{listing, stack_lines, step_line, trace, Trace};
use crate::tabs::qwengpu_chat::ChatPanel;
use crate::tabs::qwengpu_layers::{self, LayersPanel};
use crate::tabs::qwengpu_spliced::{self, SplicedPanel};
use kernels_wasm::protocol::{Reply, Request, ServerMessage};
use kernels_wasm::qwengpu::suite::kernels;
use leptos::prelude::*;

#[component]
pub fn QwenGpuTab() -> impl IntoView {
    let suite = StoredValue::new(kernels());
    let bridge = expect_context::<Bridge>();
    let connected = move || bridge.status.with(|s| s.hello().is_some_and(|h| h.capabilities.clang.available));
    let names: Vec<&'static str> = suite.with_value(|s| s.iter().map(|k| k.name).collect());
    // The kernel starts from the link (kernel=bitonic_step).
    let link = PageLink::get();
    let first = link.choice("kernel", |k| names.iter().position(|n| *n == k), 0, names[0]);
    let chosen = RwSignal::new(first);
    let ptx = RwSignal::new(suite.with_value(|s| s[first].ptx.to_string()));
    let cuda = RwSignal::new(suite.with_value(|s| s[first].cuda.to_string()));
    let cuda_status = RwSignal::new(String::new());
    let run = RwSignal::new(None::<Result<Trace, String>>);
    let position = RwSignal::new(0usize);

    let pick = move |i: usize| {
        chosen.set(i);
        link.set("kernel", suite.with_value(|s| s[i].name));
        ptx.set(suite.with_value(|s| s[i].ptx.to_string()));
        cuda.set(suite.with_value(|s| s[i].cuda.to_string()));
        cuda_status.set(String::new());
        run.set(None);
        position.set(0);
    };
    let start = move |_| {
        let result = suite.with_value(|s| trace(&s[chosen.get_untracked()], &ptx.get_untracked()));
        position.set(0);
        run.set(Some(result));
    };
    // CUDA → PTX by the host's clang-19, through the bridge; the PTX replaces the editor's.
    let compile_cuda = move |_| {
        cuda_status.set("compiling on the host …".into());
        let sent = bridge.request(Request::QwengpuCompile { cuda: cuda.get_untracked() }, move |m| {
            match m {
                ServerMessage::Result { result: Reply::QwengpuPtx { ptx: p }, .. } => {
                    ptx.set(p.clone());
                    run.set(None);
                    cuda_status.set("compiled by the host's clang-19: the PTX editor holds its output".into());
                }
                ServerMessage::Error(e) => cuda_status.set(e.message.clone()),
                _ => return false,
            }
            true
        });
        if let Err(e) = sent {
            cuda_status.set(e);
        }
    };
    let len = Signal::derive(move || {
        run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).map(|t| t.snapshots.len()).unwrap_or(0))
    });
    let summary = move || {
        run.with(|r| match r {
            None => "not run yet".to_string(),
            Some(Err(e)) => e.clone(),
            Some(Ok(t)) => format!(
                "{} steps on the interpreter; {} ROM blocks of 32; outputs {} the plain Rust version",
                t.snapshots.len(),
                t.kernel.program.blocks.len(),
                if t.arrays == t.expected { "equal" } else { "DIFFER from" }
            ),
        })
    };
    let snapshot = move || {
        run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).and_then(|t| t.snapshots.get(position.get()).cloned()))
    };
    let memory = Signal::derive(move || {
        snapshot().map(|s| s.global.iter().map(|&v| v as i32 as f32).collect()).unwrap_or_else(|| vec![0.0; 126])
    });
    let rom = move || {
        run.with(|r| match r {
            Some(Ok(t)) => listing(&t.kernel.program, &t.kernel.rom_lines)
                .into_iter()
                .enumerate()
                .map(|(b, line)| {
                    let current = move || snapshot().is_some_and(|s| s.record.block == b);
                    view! { <li class:current=current data-testid="qwengpu-rom-block">{line}</li> }
                })
                .collect_view()
                .into_any(),
            _ => ().into_any(),
        })
    };
    let step_text = move || snapshot().map(|s| step_line(position.get(), &s.record));
    // Every lane's row and every register's column from the start (dashes until a run), so the
    // panel has its full width before there are values.
    let spec = kernels_wasm::qwengpu::isa::MachineSpec::default();
    let registers = move || {
        let regs = snapshot().map(|s| s.regs).unwrap_or_default();
        (0..spec.lanes)
            .map(|lane| {
                let value = |r: usize| regs.get(lane).and_then(|l| l.get(r)).copied();
                let cell = move |r: usize| value(r).map_or("–".to_string(), |v| (v as i32).to_string());
                view! {
                    <tr data-testid="qwengpu-lane">
                        <th>{format!("lane {lane}")}</th>
                        {(0..spec.regs).map(|r| view! { <td class="num">{cell(r)}</td> }).collect_view()}
                    </tr>
                }
            })
            .collect_view()
    };
    // Which compiled machine the panel below runs: the second design (inside a language model,
    // the default) or the first; every timed run of this visit goes in one chart.
    let second = RwSignal::new(link.choice(
        "design",
        |d| ["first", "second"].iter().position(|&n| n == d).map(|i| i == 1),
        true,
        "second",
    ));
    let rates = RwSignal::new(Rates::default());
    let series: Vec<String> =
        qwengpu_spliced::SERIES.into_iter().chain(qwengpu_layers::SERIES).map(String::from).collect();
    let chart = {
        let series = series.clone();
        Signal::derive(move || rates.with(|r| r.groups(&series)))
    };
    let pick_design = move |ev| {
        let s = event_target_value(&ev) != "first";
        second.set(s);
        link.set("design", if s { "second" } else { "first" });
    };
    let stack =
        move || snapshot().map(|s| stack_lines(&s.stack).into_iter().map(|l| view! { <li>{l}</li> }).collect_view());

    view! {
        <section class="qwengpu" data-testid="qwengpu-tab">
            <h2>"qwenGPU: a 4-lane SIMT machine, CUDA lowered from PTX"</h2>
            <p class="lede">
                "The machine: 4 lanes, 15 registers per lane, a ROM of 32 blocks of up to 4 instructions, 126 words of "
                "global memory, shared memory, atomics, warp shuffles, barriers, and divergent branches that reconverge at "
                "their immediate post-dominator. clang-19 compiled each kernel to PTX (committed beside it); this page "
                "lowers the PTX itself and runs it on the reference interpreter, and on the machine compiled into Gated "
                "DeltaNet and SwiGLU layers (below), checked against the interpreter after every step."
            </p>
            <div class="controls">
                <label>
                    "kernel "
                    <select data-testid="qwengpu-kernel" on:change=move |ev| {
                        if let Ok(i) = event_target_value(&ev).parse() { pick(i) }
                    }>
                        {names
                            .iter()
                            .enumerate()
                            .map(|(i, n)| view! { <option value=i.to_string() selected=i == first>{*n}</option> })
                            .collect_view()}
                    </select>
                </label>
                <button data-testid="qwengpu-run" on:click=start>"lower and run"</button>
            </div>
            <p data-testid="qwengpu-summary">{summary}</p>
            <div class="row">
                <details class="demo" open>
                    <summary>"CUDA (editable with the bridge: the host's clang-19 compiles it)"</summary>
                    <textarea data-testid="qwengpu-cuda" rows="18" cols="70" prop:value=move || cuda.get()
                        prop:readOnly=move || !connected()
                        on:input=move |ev| cuda.set(event_target_value(&ev))></textarea>
                    <div>
                        <button data-testid="qwengpu-cuda-compile" on:click=compile_cuda prop:disabled=move || !connected()>
                            "compile CUDA on the host"
                        </button>
                        " "
                        <span data-testid="qwengpu-cuda-status" style="white-space: pre-wrap">{move || {
                            let s = cuda_status.get();
                            if s.is_empty() && !connected() {
                                "no bridge with clang-19: the CUDA is read-only; the PTX can still be edited".to_string()
                            } else {
                                s
                            }
                        }}</span>
                    </div>
                </details>
                <details class="demo">
                    <summary>"PTX (editable)"</summary>
                    <textarea data-testid="qwengpu-ptx" rows="24" cols="70" prop:value=move || ptx.get()
                        on:input=move |ev| ptx.set(event_target_value(&ev))></textarea>
                </details>
            </div>
            <div class="demo">
                <h3>"ROM blocks"</h3>
                <ol class="rom" start="0">{rom}</ol>
            </div>
            <div class="demo">
                <StepControls len=len position=position />
                <p data-testid="qwengpu-step">{step_text}</p>
                <div class="row">
                    <table class="outputs registers" data-testid="qwengpu-registers">
                        <caption>"registers of the warp that ran (r0 … r14)"</caption>
                        <thead>
                            <tr>
                                <th></th>
                                {(0..spec.regs).map(|r| view! { <th data-testid="qwengpu-reg-head">{format!("r{r}")}</th> }).collect_view()}
                            </tr>
                        </thead>
                        <tbody>{registers}</tbody>
                    </table>
                    <div>
                        <h4>"SIMT stack (top first)"</h4>
                        <ul data-testid="qwengpu-stack">{stack}</ul>
                    </div>
                </div>
                <Heatmap rows=9 cols=14 values=memory label="global memory: 126 words" width=420 />
            </div>
            <label>
                "compiled machine "
                <select data-testid="qwengpu-design" on:change=pick_design>
                    <option value="second" selected=move || second.get()>"second design: inside a language model, one token per step"</option>
                    <option value="first" selected=move || !second.get()>"first design: 117 layers, a token per lane-instruction (wasm or WebGPU)"</option>
                </select>
            </label>
            <Show when=move || second.get() fallback=move || view! { <LayersPanel suite=suite chosen=chosen ptx=ptx rates=rates /> }>
                <SplicedPanel suite=suite chosen=chosen ptx=ptx rates=rates />
            </Show>
            <Show when=move || rates.with(|r| !r.0.is_empty())>
                <BarChart title="machine steps per second per kernel (timed runs of this visit)"
                    unit="steps/s" series=series.clone() groups=chart testid="qwengpu-speed-chart" />
            </Show>
            <ChatPanel kernel=Signal::derive(move || suite.with_value(|s| s[chosen.get()].name)) />
        </section>
    }
}
