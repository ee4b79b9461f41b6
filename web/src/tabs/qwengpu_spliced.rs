//! The qwenGPU tab's second design (the default): the chosen kernel launched inside the second
//! machine spliced into a language model, in this page (`logic::qwengpu_spliced`). One token is
//! one step's record or one of its VAL tokens, each picked by the model's argmax; per step, the
//! tokens the model chose and the machine read back out of its DeltaNet rows beside the
//! interpreter's.

use crate::components::StepControls;
use crate::gpu::{GpuLine, PageGpu};
use crate::logic::plot::Rates;
use crate::logic::qwengpu::step_line;
use crate::logic::qwengpu_spliced::{spliced_run, token_text, SplicedModel, SplicedRun, SplicedStep};
use crate::logic::qwengpu_spliced_gpu::{gpu_machine, spliced_run_gpu};
use crate::tabs::qwengpu_layers::Backend;
use kernels_wasm::gpu::machine::GpuMachine;
use kernels_wasm::qwengpu::sequencer::EXITED;
use kernels_wasm::qwengpu::splice::Runner;
use kernels_wasm::qwengpu::suite::SuiteKernel;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::web_sys::window;

/// The chart's series of this panel.
pub const SERIES: [&str; 2] = ["second design (wasm)", "second design (WebGPU)"];

fn now() -> f64 {
    window().and_then(|w| w.performance()).map(|p| p.now()).unwrap_or(0.0)
}

/// Launches `k` inside the page's model on `backend`: on wasm in `runner`, on WebGPU in
/// `machine` (each built on first use and kept; a GPU machine that failed or is nearly full is
/// built again).
async fn run_on(
    backend: Backend,
    page: PageGpu,
    (runner, machine): (
        StoredValue<Option<Runner<'static>>, LocalStorage>,
        StoredValue<Option<GpuMachine>, LocalStorage>,
    ),
    k: &SuiteKernel,
    ptx: &str,
) -> Result<SplicedRun, String> {
    let m = SplicedModel::page()?;
    if backend == Backend::Wasm {
        let mut r = match runner.try_update_value(|r| r.take()).flatten() {
            Some(r) => r,
            None => m.runner()?,
        };
        let result = spliced_run(m, &mut r, k, ptx, now);
        runner.set_value(Some(r));
        return result;
    }
    let gpu = page.gpu().ok_or("WebGPU is not available in this browser")?;
    let taken = machine.try_update_value(|g| g.take()).flatten();
    let mut g = match taken.filter(|g| g.capacity() - g.position() > g.capacity() / 2) {
        Some(g) => g,
        None => gpu_machine(m, &gpu)?,
    };
    let result = spliced_run_gpu(m, (&gpu, &mut g), k, ptx, now).await;
    // After an error the machine's state is unknown: the next run builds a new one.
    if result.is_ok() {
        machine.set_value(Some(g));
    }
    result
}

#[component]
pub fn SplicedPanel(
    suite: StoredValue<Vec<SuiteKernel>>,
    chosen: RwSignal<usize>,
    ptx: RwSignal<String>,
    rates: RwSignal<Rates>,
) -> impl IntoView {
    // The page's model is built on the first run; the runner over it is kept while the panel
    // is (each launch's prompt resets the machine in it).
    let runner = StoredValue::new_local(None::<Runner<'static>>);
    let machine = StoredValue::new_local(None::<GpuMachine>);
    let page = PageGpu::get();
    let backend = RwSignal::new(Backend::Wasm);
    let run = RwSignal::new(None::<Result<SplicedRun, String>>);
    let position = RwSignal::new(0usize);
    let busy = RwSignal::new(false);
    Effect::new(move |_| {
        chosen.track();
        ptx.track();
        run.set(None);
    });
    let start = move |_| {
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        run.set(None);
        let on = backend.get_untracked();
        // Let the page say that it is working before the (seconds-long) build and launch.
        set_timeout(
            move || {
                spawn_local(async move {
                    let k = suite.with_value(|s| s[chosen.get_untracked()].clone());
                    let result = run_on(on, page, (runner, machine), &k, &ptx.get_untracked()).await;
                    if let Ok(r) = &result {
                        let series = if on == Backend::WebGpu { SERIES[1] } else { SERIES[0] };
                        rates.update(|rates| rates.record(k.name, series, r.per_s(r.launched.steps)));
                    }
                    position.set(0);
                    run.set(Some(result));
                    busy.set(false);
                });
            },
            std::time::Duration::from_millis(30),
        );
    };
    let gpu_ready = move || page.gpu_ready();
    let pick = move |ev| {
        backend.set(if event_target_value(&ev) == "webgpu" { Backend::WebGpu } else { Backend::Wasm });
    };
    let ok = move || run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).cloned());
    let len =
        Signal::derive(move || run.with(|r| r.as_ref().and_then(|r| r.as_ref().ok()).map_or(0, |r| r.steps.len())));
    let summary = move || {
        run.with(|r| match r {
            None if busy.get() => "building the spliced model (once per page), then launching the kernel in it …".into(),
            None => "not run yet".to_string(),
            Some(Err(e)) => e.clone(),
            Some(Ok(r)) => {
                let l = &r.launched;
                let read: Vec<&SplicedStep> = r.steps.iter().filter(|s| s.read).collect();
                let (on, when) = match &r.on {
                    Some(adapter) => (format!(" on WebGPU ({adapter}), one submission a token"), "after the last step"),
                    None => (String::new(), "after every step"),
                };
                format!(
                    "{} {} steps, {} tokens: the host's prompt of {}, then {} the model chose by its argmax{on} (every \
                     record, every VAL token and the end); each checked against the interpreter; outputs {} the plain Rust \
                     version; {when} the rows read back {} the interpreter's machine.",
                    r.sizes,
                    l.steps,
                    l.tokens,
                    l.prompt,
                    l.chosen,
                    if r.arrays_equal { "equal" } else { "DIFFER from" },
                    if !read.is_empty() && read.iter().all(|s| s.agrees()) { "equal" } else { "DIFFER from" }
                )
            }
        })
    };
    let speed = move || {
        ok().map(|r| {
            let on = match &r.on {
                Some(adapter) => format!("on WebGPU ({adapter}), the interpreter's check included"),
                None => {
                    "in this page (wasm, one thread), the interpreter's check included and the reading back of rows \
                         between steps left out"
                        .into()
                }
            };
            format!(
                "{on}: {:.0} ms, {:.1} steps/s, {:.0} tokens/s",
                r.ms,
                r.per_s(r.launched.steps),
                r.per_s(r.launched.tokens)
            )
        })
    };
    let at = move || ok().and_then(|r| r.steps.get(position.get()).cloned().map(|s| (r, s)));
    let step_text = move || at().map(|(_, s)| step_line(position.get(), &s.record));
    let tokens = move || at().map(|(_, s)| s.tokens.iter().map(|t| view! { <li>{token_text(t)}</li> }).collect_view());
    let registers = move || {
        at().map(|(r, s)| {
            let i = position.get();
            let before = r.steps[..i].iter().rev().find(|b| b.record.warp == s.record.warp && b.read).cloned();
            let pc = |p: Option<u32>| {
                p.map_or("?".into(), |p| if p == u32::from(EXITED) { "exited".into() } else { p.to_string() })
            };
            (0..s.interpreter.len())
                .map(|lane| {
                    let sent = s.sent.get(lane).cloned().unwrap_or_default();
                    let want = s.pcs.get(lane).copied();
                    let rows = match s.rows.get(lane) {
                        // On WebGPU the rows are read back after the last step only.
                        None => view! {
                            <tr data-testid="qwengpu-spliced-lane"><th>{format!("lane {lane}: rows not read back at this step")}</th></tr>
                        }
                        .into_any(),
                        Some(row) => {
                            let cells = row
                                .values
                                .iter()
                                .enumerate()
                                .map(|(k, &v)| {
                                    let changed = before
                                        .as_ref()
                                        .is_some_and(|b| b.rows.get(lane).and_then(|r| r.values.get(k)) != Some(&v));
                                    let differs = v != sent.get(k).copied();
                                    let text = v.map_or("?".to_string(), |v| (v as i32).to_string());
                                    view! { <td class="num" class:changed=changed class:differs=differs>{text}</td> }
                                })
                                .collect_view();
                            view! {
                                <tr data-testid="qwengpu-spliced-lane">
                                    <th class:differs=row.pc != want>{format!("lane {lane}, PC {}: rows", pc(row.pc))}</th>
                                    {cells}
                                </tr>
                            }
                            .into_any()
                        }
                    };
                    let theirs = s.interpreter.get(lane).cloned().unwrap_or_default();
                    let interp = theirs
                        .iter()
                        .enumerate()
                        .map(|(k, &v)| {
                            // A value the steps never sent: no later step reads it, so no row holds it.
                            let unsent = sent.get(k) != Some(&v);
                            view! { <td class="num" class:unsent=unsent>{v as i32}</td> }
                        })
                        .collect_view();
                    view! {
                        {rows}
                        <tr class="interp"><th>{format!("interpreter, PC {}", pc(want))}</th>{interp}</tr>
                    }
                })
                .collect_view()
        })
    };
    let memory = move || {
        at().map(|(r, s)| {
            if !s.read {
                return "global memory: not read back at this step (on WebGPU the rows are read after the last step)".into();
            }
            let i = position.get();
            let before = i.checked_sub(1).filter(|&p| r.steps[p].read).map(|p| r.steps[p].memory.clone());
            let written: Vec<String> = s
                .memory
                .iter()
                .enumerate()
                .filter(|(k, w)| before.as_ref().is_some_and(|b| b.get(*k) != Some(*w)))
                .map(|(k, w)| format!("word {k} = {}", w.map_or("?".into(), |w| (w as i32).to_string())))
                .collect();
            let equal = s.memory.iter().zip(&s.global).all(|(m, &g)| *m == Some(g));
            let unread_before = i > 0 && before.is_none();
            format!(
                "global memory read back from a load mixer's rows, written by this step: {}. All {} words {} the interpreter's.",
                match (unread_before, written.is_empty()) {
                    (true, _) => "not known (the step before was not read back)".into(),
                    (false, true) => "none".into(),
                    (false, false) => written.join(", "),
                },
                s.memory.len(),
                if equal { "equal" } else { "DIFFER from" }
            )
        })
    };

    view! {
        <div class="demo" data-testid="qwengpu-spliced">
            <h3>"Inside a language model (the second design)"</h3>
            <p>
                "The machine as compiled layers spliced in front of a llama's decoder layers, on one residual stream, with "
                "its tokens appended to the vocabulary: here the tiny random llama of the tests (hidden 576, as SmolLM2-135M; "
                "the conversation below runs the real SmolLM2 through the bridge). The host feeds the prompt: the program "
                "image, global memory and the launch. From there each token is the model's argmax over its whole vocabulary, "
                "fed back as the next input: a step's record (warp, ROM block, lanes), then its VAL tokens (the live-out "
                "registers and the stores), and after the last step the end record. Registers, every lane's PC and memory "
                "live in DeltaNet rows; the machine has 4 lanes, 15 registers, a ROM of 64 blocks, no divider (division is "
                "a loop) and reconverges at the lowest PC. The first run builds the model (seconds). On WebGPU a token is one "
                "submission of every layer, the head and the argmax, whose id is the next position's input without leaving "
                "the GPU; the page reads the chosen ids back 256 positions at a time, and the rows after the last step."
            </p>
            <GpuLine />
            <label>
                "run on "
                <select data-testid="qwengpu-spliced-backend" on:change=pick prop:disabled=move || busy.get()>
                    <option value="wasm" selected=true>"wasm (this page, one thread)"</option>
                    <option value="webgpu" prop:disabled=move || !gpu_ready()>
                        "WebGPU (a token is one submission; the argmax on the GPU)"
                    </option>
                </select>
            </label>
            " "
            <button data-testid="qwengpu-spliced-run" on:click=start prop:disabled=move || busy.get()>
                "launch in the spliced model"
            </button>
            <p data-testid="qwengpu-spliced-summary">{summary}</p>
            <p data-testid="qwengpu-spliced-speed">{speed}</p>
            <StepControls len=len position=position />
            <p data-testid="qwengpu-spliced-step">{step_text}</p>
            <div class="row">
                <div>
                    <h4>"the tokens the model chose for this step"</h4>
                    <ul data-testid="qwengpu-spliced-tokens">{tokens}</ul>
                </div>
                <table class="outputs" data-testid="qwengpu-spliced-registers">
                    <caption>
                        "the warp's registers and PCs read back from the model's DeltaNet rows, beside the interpreter's "
                        "(dimmed: a value no later step reads, so never sent)"
                    </caption>
                    <tbody>{registers}</tbody>
                </table>
            </div>
            <p data-testid="qwengpu-spliced-memory">{memory}</p>
        </div>
    }
}
