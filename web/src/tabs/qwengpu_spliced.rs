//! The qwenGPU tab's second design (the default): the chosen kernel launched inside the second
//! machine spliced into a language model, in this page (`logic::qwengpu_spliced`). One token is
//! one step's record or one of its VAL tokens, each picked by the model's argmax; per step, the
//! tokens the model chose and the machine read back out of its DeltaNet rows beside the
//! interpreter's.

use crate::components::StepControls;
use crate::logic::plot::Rates;
use crate::logic::qwengpu::step_line;
use crate::logic::qwengpu_spliced::{spliced_run, token_text, SplicedModel, SplicedRun, SplicedStep};
use kernels_wasm::qwengpu::sequencer::EXITED;
use kernels_wasm::qwengpu::splice::Runner;
use kernels_wasm::qwengpu::suite::SuiteKernel;
use leptos::prelude::*;
use leptos::web_sys::window;

/// The chart's series of this panel.
pub const SERIES: &str = "second design (wasm)";

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
        // Let the page say that it is working before the (seconds-long) build and launch.
        set_timeout(
            move || {
                let k = suite.with_value(|s| s[chosen.get_untracked()].clone());
                let now = || window().and_then(|w| w.performance()).map(|p| p.now()).unwrap_or(0.0);
                let taken = runner.try_update_value(|r| r.take()).flatten();
                let result = SplicedModel::page().and_then(|m| {
                    let mut r = match taken {
                        Some(r) => r,
                        None => m.runner()?,
                    };
                    let result = spliced_run(m, &mut r, &k, &ptx.get_untracked(), now);
                    runner.set_value(Some(r));
                    result
                });
                if let Ok(r) = &result {
                    rates.update(|rates| rates.record(k.name, SERIES, r.per_s(r.launched.steps)));
                }
                position.set(0);
                run.set(Some(result));
                busy.set(false);
            },
            std::time::Duration::from_millis(30),
        );
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
                format!(
                    "{} {} steps, {} tokens: the host's prompt of {}, then {} the model chose by its argmax (every record, \
                     every VAL token and the end); each checked against the interpreter; outputs {} the plain Rust version; \
                     after every step the rows read back {} the interpreter's machine.",
                    r.sizes,
                    l.steps,
                    l.tokens,
                    l.prompt,
                    l.chosen,
                    if r.arrays_equal { "equal" } else { "DIFFER from" },
                    if r.steps.iter().all(SplicedStep::agrees) { "equal" } else { "DIFFER from" }
                )
            }
        })
    };
    let speed = move || {
        ok().map(|r| {
            format!(
                "in this page (wasm, one thread), the interpreter's check included and the reading back of rows \
                 between steps left out: {:.0} ms, {:.1} steps/s, {:.0} tokens/s",
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
            let before = r.steps[..i].iter().rev().find(|b| b.record.warp == s.record.warp).cloned();
            s.rows
                .iter()
                .enumerate()
                .map(|(lane, row)| {
                    let sent = s.sent.get(lane).cloned().unwrap_or_default();
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
                    let pc = |p: Option<u32>| {
                        p.map_or("?".into(), |p| if p == u32::from(EXITED) { "exited".into() } else { p.to_string() })
                    };
                    let want = s.pcs.get(lane).copied();
                    view! {
                        <tr data-testid="qwengpu-spliced-lane">
                            <th class:differs=row.pc != want>{format!("lane {lane}, PC {}: rows", pc(row.pc))}</th>
                            {cells}
                        </tr>
                        <tr class="interp"><th>{format!("interpreter, PC {}", pc(want))}</th>{interp}</tr>
                    }
                })
                .collect_view()
        })
    };
    let memory = move || {
        at().map(|(r, s)| {
            let i = position.get();
            let before = i.checked_sub(1).map(|p| r.steps[p].memory.clone());
            let written: Vec<String> = s
                .memory
                .iter()
                .enumerate()
                .filter(|(k, w)| before.as_ref().is_some_and(|b| b.get(*k) != Some(*w)))
                .map(|(k, w)| format!("word {k} = {}", w.map_or("?".into(), |w| (w as i32).to_string())))
                .collect();
            let equal = s.memory.iter().zip(&s.global).all(|(m, &g)| *m == Some(g));
            format!(
                "global memory read back from a load mixer's rows, written by this step: {}. All {} words {} the interpreter's.",
                if written.is_empty() { "none".into() } else { written.join(", ") },
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
                "a loop) and reconverges at the lowest PC. The first run builds the model (seconds)."
            </p>
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
