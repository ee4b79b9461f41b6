//! The qwenGPU tab's compiled-layers panel: the chosen kernel run on the machine compiled into
//! Gated DeltaNet and SwiGLU layers, in this page: on wasm, or on WebGPU (`gpu::qwengpu`, one
//! token per dispatch). Per step: the registers and memory words decoded from the DeltaNet
//! state rows beside the interpreter's (cells changed by the step and any difference marked),
//! the step's EXEC tokens, and the ROM rows decoded.

use crate::components::StepControls;
use crate::gpu::{GpuLine, GpuStatus, PageGpu};
use crate::logic::plot::Rates;
use crate::logic::qwengpu::{layers_run, stack_lines, step_line, LayersRun};
use kernels_wasm::gpu::qwengpu::GpuExecutor;
use kernels_wasm::qwengpu::compiled::Compiled;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::run::{Executor, Runner, TokenView};
use kernels_wasm::qwengpu::suite::SuiteKernel;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::web_sys::window;

/// The chart's series of this panel: its timed runs on wasm and on WebGPU.
pub const SERIES: [&str; 2] = ["first design (wasm)", "first design (WebGPU)"];

/// The timed WebGPU run's tokens per submission (the GPU makes each next input record).
const TOKENS_PER_SUBMIT: u32 = 256;

/// Where the layers run: this page's wasm, or WebGPU (the page's adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Wasm,
    WebGpu,
}

/// Runs the chosen kernel on `runner`'s layers on `backend`; the GPU executor (its uploaded
/// layers) is kept between runs in `gpu_exec`. (`page` comes from the component: a task has
/// no reactive owner to look the context up.)
async fn run_on(
    backend: Backend,
    page: PageGpu,
    r: &mut Runner,
    gpu_exec: StoredValue<Option<Box<dyn Executor>>, LocalStorage>,
    k: &SuiteKernel,
    ptx: &str,
) -> Result<LayersRun, String> {
    let now = || window().and_then(|w| w.performance()).map(|p| p.now()).unwrap_or(0.0);
    if backend == Backend::WebGpu {
        let exec = match gpu_exec.try_update_value(|e| e.take()).flatten() {
            Some(e) => e,
            None => {
                let gpu = page.gpu().ok_or("WebGPU is not available in this browser")?;
                Box::new(GpuExecutor::new(gpu, &r.c).map_err(|e| format!("WebGPU: {e}"))?)
            }
        };
        r.executor = Some(exec);
        r.batch = TOKENS_PER_SUBMIT;
    }
    let result = layers_run(r, k, ptx, now).await;
    if let Some(e) = r.executor.take() {
        gpu_exec.set_value(Some(e));
    }
    result
}

fn token_line(t: &TokenView, rows: usize) -> String {
    let op = t.op.map(|o| format!("{o:?}")).unwrap_or_else(|| "—".into());
    let mut w = Vec::new();
    if let Some((k, v)) = t.writes.reg {
        w.push(format!("thread {} row {} := {}", k / rows, k % rows, v as i32));
    }
    if let Some((k, v)) = t.writes.global {
        w.push(format!("global[{k}] := {}", v as i32));
    }
    if let Some((k, v)) = t.writes.shared {
        w.push(format!("shared row {k} := {}", v as i32));
    }
    let phase = if t.phase == 1 { " (second pass)" } else { "" };
    format!(
        "EXEC thread {} · ROM {}.{} · {op}{phase} → {}",
        t.thread,
        t.block,
        t.slot,
        if w.is_empty() { "no write".into() } else { w.join(", ") }
    )
}

#[component]
pub fn LayersPanel(
    suite: StoredValue<Vec<SuiteKernel>>,
    chosen: RwSignal<usize>,
    ptx: RwSignal<String>,
    rates: RwSignal<Rates>,
) -> impl IntoView {
    let runner = StoredValue::new_local(None::<Runner>);
    let gpu_exec = StoredValue::new_local(None::<Box<dyn Executor>>);
    let page = PageGpu::get();
    let backend = RwSignal::new(Backend::Wasm);
    // The backend of the run shown (its adapter for WebGPU).
    let ran_on = RwSignal::new(None::<String>);
    let built = RwSignal::new(false);
    let run = RwSignal::new(None::<Result<LayersRun, String>>);
    let position = RwSignal::new(0usize);
    // A new kernel or edited PTX makes the last run stale.
    Effect::new(move |_| {
        chosen.track();
        ptx.track();
        run.set(None);
    });
    let busy = RwSignal::new(false);
    let start = move |_| {
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        run.set(None);
        let on = backend.get_untracked();
        // Let the page show that it is working before the (seconds-long) build and run.
        set_timeout(
            move || {
                spawn_local(async move {
                    let taken = runner.try_update_value(|slot| slot.take()).flatten();
                    let mut r =
                        match taken.map(Ok).unwrap_or_else(|| Compiled::new(MachineSpec::default()).map(Runner::new)) {
                            Ok(r) => r,
                            Err(e) => {
                                run.set(Some(Err(e.to_string())));
                                busy.set(false);
                                return;
                            }
                        };
                    built.set(true);
                    let k = suite.with_value(|s| s[chosen.get_untracked()].clone());
                    let result = run_on(on, page, &mut r, gpu_exec, &k, &ptx.get_untracked()).await;
                    runner.set_value(Some(r));
                    ran_on.set(match (on, page.status.get_untracked()) {
                        (Backend::WebGpu, GpuStatus::Ready(name)) => Some(name),
                        _ => None,
                    });
                    position.set(0);
                    if let Ok(lr) = &result {
                        let on = if on == Backend::WebGpu { SERIES[1] } else { SERIES[0] };
                        rates.update(|r| r.record(k.name, on, lr.per_s(lr.report.steps)));
                    }
                    run.set(Some(result));
                    busy.set(false);
                });
            },
            std::time::Duration::from_millis(30),
        );
    };
    let ok = move || run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).cloned());
    let len = Signal::derive(move || {
        run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).map(|r| r.report.views.len()).unwrap_or(0))
    });
    let summary = move || {
        run.with(|r| match r {
            None if busy.get() => {
                let on = if backend.get() == Backend::WebGpu { " on WebGPU" } else { "" };
                if built.get() {
                    format!("running{on} in lockstep with the interpreter …")
                } else {
                    format!("building the layers (once per page), then running{on} in lockstep with the interpreter …")
                }
            }
            None => "not run yet".to_string(),
            Some(Err(e)) => e.clone(),
            Some(Ok(r)) => {
                let s = r.summary;
                format!(
                    "{} decoder layers ({} Gated DeltaNet heads, {} SwiGLU MLPs, {} hidden units), d_model {}; {} nonzero weights \
                     ({:.2e} as dense matrices); {} floats of DeltaNet state. {} steps, {} tokens (program image {}, inputs {}, \
                     special registers and control rows {}, EXEC {}, CTRL and FETCH {}, VAL {}); bit-exact with the interpreter after every step; outputs {} the \
                     plain Rust version.",
                    s.decoder_layers,
                    s.deltanet_heads,
                    s.mlp_sublayers,
                    s.hidden_units,
                    s.d_model,
                    s.nonzero,
                    s.parameters as f64,
                    s.state_floats,
                    r.report.steps,
                    r.report.tokens,
                    r.report.counts.image,
                    r.report.counts.inputs,
                    r.report.counts.specials,
                    r.report.counts.exec,
                    r.report.counts.control,
                    r.report.counts.val,
                    if r.arrays_equal { "equal" } else { "DIFFER from" }
                )
            }
        })
    };
    let speed = move || {
        ok().map(|r| {
            let rate = format!(
                "{:.0} ms, {:.0} steps/s, {:.0} tokens/s",
                r.ms,
                r.per_s(r.report.steps),
                r.per_s(r.report.tokens)
            );
            match ran_on.get() {
                None => format!("in this page (wasm, one thread, without the check): {rate}"),
                Some(adapter) => format!(
                    "on WebGPU ({adapter}), without the check, up to {TOKENS_PER_SUBMIT} tokens per submission: {rate} (wall clock); {}",
                    match r.device_ms {
                        Some(ms) => format!("the dispatches' GPU time (timestamp queries) {ms:.1} ms"),
                        None => "no timestamp queries on this adapter".into(),
                    }
                ),
            }
        })
    };
    let gpu_ready = move || page.gpu_ready();
    let pick = move |ev| {
        backend.set(if event_target_value(&ev) == "webgpu" { Backend::WebGpu } else { Backend::Wasm });
    };
    let view_at = move || ok().and_then(|r| r.report.views.get(position.get()).cloned().map(|v| (r, v)));
    let step_text = move || view_at().map(|(_, v)| step_line(position.get(), &v.record));
    let registers = move || {
        view_at().map(|(r, v)| {
            let i = position.get();
            let before =
                i.checked_sub(1).and_then(|p| r.report.views.get(p)).filter(|p| p.record.warp == v.record.warp);
            let interp = r.interpreter.get(i).cloned();
            v.regs
                .iter()
                .enumerate()
                .map(|(lane, regs)| {
                    let theirs = interp.as_ref().map(|s| s.regs[lane].clone()).unwrap_or_default();
                    let cells = regs
                        .iter()
                        .enumerate()
                        .map(|(k, &x)| {
                            let changed = before.is_some_and(|b| b.regs[lane][k] != x);
                            let differs = theirs.get(k) != Some(&x);
                            view! { <td class="num" class:changed=changed class:differs=differs>{x as i32}</td> }
                        })
                        .collect_view();
                    let interp_cells = theirs.iter().map(|&x| view! { <td class="num">{x as i32}</td> }).collect_view();
                    view! {
                        <tr data-testid="qwengpu-layers-lane"><th>{format!("lane {lane}: state rows")}</th>{cells}</tr>
                        <tr class="interp"><th>"interpreter"</th>{interp_cells}</tr>
                    }
                })
                .collect_view()
        })
    };
    let memory = move || {
        view_at().map(|(r, v)| {
            let i = position.get();
            let before = i.checked_sub(1).and_then(|p| r.report.views.get(p)).map(|p| p.global.clone());
            let theirs = r.interpreter.get(i).map(|s| s.global.clone()).unwrap_or_default();
            let changed: Vec<String> = v
                .global
                .iter()
                .enumerate()
                .filter(|(k, x)| before.as_ref().is_some_and(|b| b[*k] != **x))
                .map(|(k, x)| format!("word {k} = {}", *x as i32))
                .collect();
            let differs = v.global != theirs;
            format!(
                "global memory rows written by this step: {}. All {} words {} the interpreter's.",
                if changed.is_empty() { "none".into() } else { changed.join(", ") },
                v.global.len(),
                if differs { "DIFFER from" } else { "equal" }
            )
        })
    };
    let tokens = move || {
        view_at().map(|(r, v)| {
            let rows = r.reg_rows;
            v.tokens.iter().map(|t| view! { <li>{token_line(t, rows)}</li> }).collect_view()
        })
    };
    let stack = move || {
        view_at().map(|(_, v)| stack_lines(&v.stack).into_iter().map(|l| view! { <li>{l}</li> }).collect_view())
    };
    let rom = move || {
        ok().map(|r| {
            r.rom_ops
                .iter()
                .enumerate()
                .filter_map(|(row, op)| op.map(|o| (row, o)))
                .map(|(row, o)| {
                    let name = if row + 1 == r.rom_rows {
                        "no-op row".to_string()
                    } else {
                        format!("block {} slot {}", row / r.block_len, row % r.block_len)
                    };
                    view! { <li>{format!("row {row} ({name}): {o:?}")}</li> }
                })
                .collect_view()
        })
    };

    view! {
        <div class="demo" data-testid="qwengpu-layers">
            <h3>"Compiled layers (the first design)"</h3>
            <p>
                "The same machine as Qwen3.5 decoder layers with computed weights: Gated DeltaNet heads whose state rows hold the "
                "ROM, the register file (4 copies, one per read port), global and shared memory, and SwiGLU MLPs of AND units for "
                "decoding, the ALU (add to divide, shifts, compares), shuffles and addressing. One token is one instruction for one "
                "lane; each carries the previous token's writes. The sequencer is in the layers too: each warp's SIMT stack is a "
                "DeltaNet row, each CTA's warp statuses another, and every token computes the next token's record (lane, slot, "
                "then CTRL: branch, reconvergence, the next warp; FETCH: its top entry). The host only copies each output record "
                "into the next token. The first run builds the layers (a few seconds). On WebGPU one dispatch runs one token "
                "through every layer (one invocation: a token's work is sparse and sequential), with exact f32 (correctly "
                "rounded square root and division in integer arithmetic); the layers are uploaded on the first WebGPU run. The "
                "checked run reads every token back; the timed run submits up to 256 tokens at a time, the GPU copying each "
                "output record into the next input itself. "
                "The layers have no SIMD kernel: they are sparse lookups, so wasm runs them one way."
            </p>
            <GpuLine />
            <label>
                "run on "
                <select data-testid="qwengpu-layers-backend" on:change=pick prop:disabled=move || busy.get()>
                    <option value="wasm" selected=true>"wasm (this page, one thread)"</option>
                    <option value="webgpu" prop:disabled=move || !gpu_ready()>"WebGPU"</option>
                </select>
            </label>
            " "
            <button data-testid="qwengpu-layers-run" on:click=start prop:disabled=move || busy.get()>"run on the compiled layers"</button>
            <p data-testid="qwengpu-layers-summary">{summary}</p>
            <p data-testid="qwengpu-layers-speed">{speed}</p>
            <StepControls len=len position=position />
            <p data-testid="qwengpu-layers-step">{step_text}</p>
            <table class="outputs" data-testid="qwengpu-layers-registers">
                <caption>"registers decoded from the register file's DeltaNet rows, beside the interpreter's"</caption>
                <tbody>{registers}</tbody>
            </table>
            <p data-testid="qwengpu-layers-memory">{memory}</p>
            <div class="row">
                <div>
                    <h4>"this step's tokens"</h4>
                    <ul data-testid="qwengpu-layers-tokens">{tokens}</ul>
                </div>
                <div>
                    <h4>"SIMT stack (decoded from the warp's DeltaNet row)"</h4>
                    <ul>{stack}</ul>
                </div>
            </div>
            <details>
                <summary>"ROM rows decoded from the ROM head's state"</summary>
                <ul data-testid="qwengpu-layers-rom">{rom}</ul>
            </details>
        </div>
    }
}
