//! The in-page benchmark: the current problem's kernel on every backend this wasm build has
//! (scalar and simd128), timed here with `performance.now()`, outputs checked bit for bit.

use crate::logic::bitnet::{time_per_call, Problem};
use kernels_wasm::bitnet::backend::Backend;
use leptos::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// Each timed batch runs for at least this long (the page clock is coarse).
const BATCH_MS: f64 = 40.0;
const BATCHES: usize = 5;

#[derive(Debug, Clone, PartialEq)]
struct Result_ {
    backend: &'static str,
    ms: f64,
    identical: bool,
}

#[component]
pub fn Bench(problem: Arc<Problem>) -> impl IntoView {
    let running = RwSignal::new(false);
    let results = RwSignal::new(None::<Result<Vec<Result_>, String>>);
    let weights = (problem.m * problem.k) as f64;
    let run = {
        let p = problem.clone();
        move |_| {
            running.set(true);
            results.set(None);
            let p = p.clone();
            // Let the page paint "running…" before the main thread is busy for a few seconds.
            set_timeout(
                move || {
                    results.set(Some(measure(&p)));
                    running.set(false);
                },
                Duration::from_millis(30),
            );
        }
    };
    let table = move || {
        results.get().map(|r| match r {
            Err(e) => view! { <p class="error">{e}</p> }.into_any(),
            Ok(rows) => {
                let scalar = rows.first().map(|r| r.ms).unwrap_or(f64::NAN);
                view! {
                    <table class="outputs" data-testid="bench-results">
                        <thead>
                            <tr>
                                <th>"backend"</th>
                                <th>"ms per GEMV"</th>
                                <th>"Gweights/s"</th>
                                <th>"× scalar"</th>
                                <th>"output bits = scalar's"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {rows
                                .into_iter()
                                .map(|r| {
                                    view! {
                                        <tr data-backend=r.backend data-ratio=format!("{:.3}", scalar / r.ms)>
                                            <td>{r.backend}</td>
                                            <td class="num">{format!("{:.4}", r.ms)}</td>
                                            <td class="num" data-testid="bench-gws">{format!("{:.3}", weights / r.ms / 1e6)}</td>
                                            <td class="num">{format!("{:.2}", scalar / r.ms)}</td>
                                            <td data-testid="bench-identical">{if r.identical { "yes" } else { "NO" }}</td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }
        })
    };
    view! {
        <div class="demo" data-testid="bitnet-bench">
            <h3>"Run it here: wasm scalar vs simd128"</h3>
            <p>
                {format!(
                    "{} GEMV of {}×{}, including the table build (activation quantisation for I2_S); median of {BATCHES} batches of ≥ {BATCH_MS} ms, measured in this tab.",
                    problem.format.name(),
                    problem.m,
                    problem.k,
                )}
            </p>
            <button data-testid="bench-run" on:click=run disabled=move || running.get()>
                {move || if running.get() { "running…" } else { "benchmark" }}
            </button>
            {table}
        </div>
    }
}

fn measure(p: &Problem) -> Result<Vec<Result_>, String> {
    let perf = window().performance().ok_or("this browser has no performance clock")?;
    let mut now = || perf.now();
    // The scalar output the problem already holds is what every backend must reproduce.
    let reference = &p.output;
    let mut rows = Vec::new();
    for backend in Backend::available() {
        let mut y = vec![0f32; p.m];
        let mut failed = None;
        let ms = time_per_call(
            &mut now,
            &mut || {
                if let Err(e) = p.run(backend, &mut y) {
                    failed = Some(e);
                }
            },
            BATCH_MS,
            BATCHES,
        );
        if let Some(e) = failed {
            return Err(format!("{}: {e}", backend.name()));
        }
        let identical = y.iter().zip(reference).all(|(a, b)| a.to_bits() == b.to_bits());
        rows.push(Result_ { backend: backend.name(), ms, identical });
    }
    Ok(rows)
}
