//! Stepping through the kernel: the weights and their packed indices, the activations and their
//! int8 quantisation, the tables the current byte's nibbles select, and the int16 partial sums
//! and int32 accumulators after each step, all from the kernel's recorded trace.

use super::table::LutTable;
use crate::components::{Heatmap, StepControls};
use crate::logic::bitnet::{Problem, MAX_STEP_WEIGHTS};
use kernels_wasm::bitnet::trace::{Step, StepKind};
use leptos::prelude::*;
use std::sync::Arc;

/// Vectors are drawn as rows of this many cells.
const VEC_COLS: usize = 32;

fn as_grid(i: usize) -> (usize, usize) {
    (i / VEC_COLS, i % VEC_COLS)
}

#[component]
pub fn Stepper(problem: Arc<Problem>) -> impl IntoView {
    let Some(trace) = problem.trace.clone() else {
        return view! {
            <p class="note" data-testid="bitnet-no-trace">
                {format!(
                    "{}×{} is {} weights: too many to step (the stepper records up to {MAX_STEP_WEIGHTS}). Run and benchmark it below, or pick a step shape.",
                    problem.m,
                    problem.k,
                    problem.m * problem.k,
                )}
            </p>
        }
            .into_any();
    };
    let trace = Arc::new(trace);
    let (m, k) = (problem.m, problem.k);
    let steps = trace.steps.len();
    let position = RwSignal::new(0usize);
    let current = {
        let trace = trace.clone();
        Memo::new(move |_| trace.steps[position.get().min(steps - 1)].clone())
    };
    // The state after the current step.
    let state = {
        let trace = trace.clone();
        Memo::new(move |_| trace.state_at(position.get() + 1))
    };
    let cols_of = move |s: &Step| match &s.kind {
        StepKind::Lookup { lookups, .. } => Some(lookups[0].cols.start),
        StepKind::MultiplyAdd { cols, .. } => Some(cols.start),
        StepKind::Widen { .. } => None,
    };
    let weight_hl = Signal::derive(move || current.with(|s| cols_of(s).map(|c| (s.row, c))));
    let act_hl = Signal::derive(move || current.with(|s| cols_of(s).map(as_grid)));
    let row_hl = Signal::derive(move || Some(as_grid(current.with(|s| s.row))));
    let index_hl = {
        let p = problem.clone();
        Signal::derive(move || match current.get() {
            Step { row, kind: StepKind::Lookup { lookups, .. }, .. } => Some((row, p.index_col(&lookups[0]))),
            Step { row, kind: StepKind::MultiplyAdd { cols, .. }, .. } => Some((row, cols.start)),
            _ => None,
        })
    };
    let weights: Vec<f32> = problem.weights.w.iter().map(|&w| w as f32).collect();
    let q: Vec<f32> = problem.acts.q.iter().map(|&v| v as f32).collect();
    let partial = Signal::derive(move || state.with(|s| s.partial.iter().map(|&v| v as f32).collect::<Vec<_>>()));
    let acc = Signal::derive(move || state.with(|s| s.acc.iter().map(|&v| v as f32).collect::<Vec<_>>()));
    let index_label = match problem.format {
        crate::logic::bitnet::Format::Tl1 => "packed pair indices 3·w0+w1+4 (one per pair)",
        crate::logic::bitnet::Format::Tl2 => {
            "packed triplet values ±|9w0+3w1+w2| (sign bit applied), then tail pair indices"
        }
        crate::logic::bitnet::Format::I2s => "I2_S 2-bit codes w+1",
    };
    let vec_rows = |n: usize| n.div_ceil(VEC_COLS);
    let describe = {
        let p = problem.clone();
        move || {
            let s = current.get();
            let st = state.get();
            match &s.kind {
                StepKind::Lookup { byte_offset, byte, lookups } => {
                    let what = |i: usize| {
                        let l = &lookups[i];
                        let kind = p.group_kind(l);
                        let sign = if l.negate { ", sign bit set: negated" } else { "" };
                        format!(
                            "{} nibble {} → table of {kind} {} (columns {}–{}), entry {}{sign}: {:+}",
                            if i == 0 { "high" } else { "low" },
                            l.nibble,
                            l.group,
                            l.cols.start,
                            l.cols.end - 1,
                            l.nibble,
                            l.value
                        )
                    };
                    format!(
                        "K block {} · row {}: byte {:#04x} at offset {byte_offset}. {}; {}. int16 partial sum of row {} = {}; int32 accumulator = {}",
                        s.block,
                        s.row,
                        byte,
                        what(0),
                        what(1),
                        s.row,
                        st.partial[s.row],
                        st.acc[s.row]
                    )
                }
                StepKind::Widen { rows } => format!(
                    "end of K block {}: the int16 sums of rows {}–{} are widened and added to their int32 accumulators (then reset)",
                    s.block,
                    rows.start,
                    rows.end - 1
                ),
                StepKind::MultiplyAdd { cols, dot } => format!(
                    "row {} block {}: Σ w·q over columns {}–{} by multiply-add (codes·q − Σq) = {dot}; int32 accumulator = {}",
                    s.row,
                    s.block,
                    cols.start,
                    cols.end - 1,
                    st.acc[s.row]
                ),
            }
        }
    };
    let tables = {
        let p = problem.clone();
        move || match current.get().kind {
            StepKind::Lookup { lookups, .. } => lookups
                .iter()
                .map(|l| {
                    let kind = p.group_kind(l);
                    let title = format!(
                        "table of {kind} {} (int8 activations at columns {}–{})",
                        l.group,
                        l.cols.start,
                        l.cols.end - 1
                    );
                    view! { <LutTable title=title entries=p.table(l.group, l.tail) current=l.nibble negate=l.negate /> }
                })
                .collect_view()
                .into_any(),
            _ => view! {
                <p class="note">
                    {if p.format == crate::logic::bitnet::Format::I2s {
                        "I2_S has no tables: the kernel multiplies the 2-bit codes with the int8 activations."
                    } else {
                        "no lookup in this step"
                    }}
                </p>
            }
            .into_any(),
        }
    };
    let outputs = {
        let p = problem.clone();
        move || {
            let st = state.get();
            let done = position.get() + 1 >= steps;
            (0..m)
                .map(|r| {
                    let bound = p.error_bound(r);
                    let y_now = st.acc[r] as f32 / p.acts.scale * p.weights.scale;
                    view! {
                        <tr class:current=move || current.with(|s| s.row == r) data-row=r>
                            <td>{r}</td>
                            <td class="num" data-testid="out-acc">{st.acc[r]}</td>
                            <td class="num" data-testid="out-y">{if done { format!("{:.5}", p.output[r]) } else { format!("({y_now:.5})") }}</td>
                            <td class="num" data-testid="out-ref">{format!("{:.5}", p.reference[r])}</td>
                            <td class="num" data-testid="out-bound">{format!("{bound:.5}")}</td>
                        </tr>
                    }
                })
                .collect_view()
        }
    };
    view! {
        <div class="demo stepper" data-testid="bitnet-stepper" data-steps=steps>
            <h3>"Step through the kernel"</h3>
            <div class="row">
                <Heatmap rows=m cols=k values=weights label="ternary weights W" highlight=weight_hl width=360 />
                <Heatmap rows=m cols=problem.index_cols() values=problem.index_grid() label=index_label highlight=index_hl width=360 />
            </div>
            <div class="row">
                <Heatmap rows=vec_rows(k) cols=VEC_COLS values=problem.x.clone() label="activations x (f32), 32 per row" highlight=act_hl width=240 />
                <Heatmap rows=vec_rows(k) cols=VEC_COLS values=q label="int8 q = round(x·127/max|x|)" highlight=act_hl width=240 />
                <Heatmap rows=vec_rows(m) cols=VEC_COLS values=partial label="int16 partial sums (per row)" highlight=row_hl width=240 />
                <Heatmap rows=vec_rows(m) cols=VEC_COLS values=acc label="int32 accumulators (per row)" highlight=row_hl width=240 />
            </div>
            <StepControls len=Signal::stored(steps) position=position />
            <p class="step-text" data-testid="bitnet-step" data-row=move || current.with(|s| s.row)>{describe}</p>
            <div class="row">{tables}</div>
            <details open>
                <summary>"outputs: int32 accumulator → y = acc / s · β, against the f32 reference"</summary>
                <table class="outputs" data-testid="bitnet-outputs">
                    <thead>
                        <tr>
                            <th>"row"</th>
                            <th>"int32 acc"</th>
                            <th>"y (kernel; in brackets until the last step)"</th>
                            <th>"f32 reference"</th>
                            <th>"bound"</th>
                        </tr>
                    </thead>
                    <tbody>{outputs}</tbody>
                </table>
            </details>
        </div>
    }
        .into_any()
}
