//! Every reusable component on generated data, so each is exercised (and tested end to end)
//! before the tabs that need it exist.

use crate::components::virtual_table::CellFn;
use crate::components::{Heatmap, StepControls, Timeline, VirtualTable};
use crate::logic::timeline::Span;
use leptos::prelude::*;
use std::sync::Arc;

const ROWS: usize = 48;
const COLS: usize = 64;
const STEPS: usize = 200;
const TABLE_ROWS: usize = 100_000;

/// Deterministic pseudo-random numbers (64-bit LCG, Knuth's MMIX constants) for demo data.
fn lcg(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *state >> 33
}

/// A smooth signed field plus ternary noise: looks like weights next to activations.
fn demo_matrix() -> Vec<f32> {
    let mut s = 7;
    (0..ROWS * COLS)
        .map(|i| {
            let (r, c) = ((i / COLS) as f32, (i % COLS) as f32);
            let noise = (lcg(&mut s) % 3) as f32 - 1.0;
            ((r / 6.0).sin() * (c / 9.0).cos() * 100.0 + noise * 20.0).round()
        })
        .collect()
}

/// A fake two-core operator trace shaped like one transformer layer per 1.2 ms.
fn demo_trace() -> Vec<Span> {
    let ops = ["rmsnorm", "q_proj", "k_proj", "v_proj", "rope", "attention", "o_proj", "gate_up", "silu", "down"];
    let mut s = 11;
    let mut spans = Vec::new();
    for layer in 0..4u64 {
        let mut t = layer * 1_200_000;
        for op in ops {
            let dur = 40_000 + lcg(&mut s) % 120_000;
            spans.push(Span { name: format!("L{layer}.{op}"), start_ns: t, end_ns: t + dur });
            // Projections overlap on the second core.
            t += if op.ends_with("proj") { dur / 2 } else { dur };
        }
    }
    spans
}

#[component]
pub fn ComponentsTab() -> impl IntoView {
    let values = Signal::stored(demo_matrix());
    let position = RwSignal::new(0usize);
    let highlight = Signal::derive(move || {
        let p = position.get();
        Some((p / COLS, p % COLS))
    });
    let cell: CellFn = Arc::new(|r, c| match c {
        0 => r.to_string(),
        1 => format!("{:#010x}", (r as u32).wrapping_mul(2654435761)),
        _ => format!("{}", ((r * 37) % 255) as i32 - 127),
    });
    view! {
        <section class="components" data-testid="components-page">
            <h2>"Components"</h2>
            <p>"The building blocks of the substrate tabs, on generated data."</p>
            <div class="demo">
                <h3>"Heatmap + step controls"</h3>
                <p>"Each step highlights the next cell in row-major order, as the LUT stepper will highlight lookups."</p>
                <Heatmap rows=ROWS cols=COLS values=values label="generated signed matrix" highlight=highlight />
                <StepControls len=Signal::stored(STEPS) position=position />
            </div>
            <div class="demo">
                <h3>"Timeline"</h3>
                <Timeline spans=Signal::stored(demo_trace()) label="generated operator trace (4 layers)" />
            </div>
            <div class="demo">
                <h3>"Virtualised table"</h3>
                <VirtualTable columns=vec!["row", "hash", "value"] rows=Signal::stored(TABLE_ROWS) cell=cell />
            </div>
        </section>
    }
}
