//! The in-page benchmark: the current problem's kernel on every backend this page has (wasm
//! scalar and simd128, and WebGPU where the browser offers an adapter), timed here with
//! `performance.now()`, outputs checked bit for bit against the scalar kernel's.

use crate::components::BarChart;
use crate::gpu::{GpuLine, PageGpu};
use crate::logic::bitnet::{time_per_call, Packed, Problem};
use crate::logic::plot::Rates;
use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::gpu::bitnet::GpuMatrix;
use kernels_wasm::gpu::Gpu;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::sync::Arc;
use std::time::Duration;

/// Each timed batch runs for at least this long (the page clock is coarse).
const BATCH_MS: f64 = 40.0;
const BATCHES: usize = 5;
/// Timed WebGPU calls (each waits for its result: the page cannot block).
const GPU_CALLS: usize = 5;

#[derive(Debug, Clone, PartialEq)]
struct Result_ {
    backend: &'static str,
    ms: f64,
    /// The dispatch alone, from timestamp queries (WebGPU where the browser allows them).
    gpu_ms: Option<f64>,
    identical: bool,
}

/// The chart's series: the page's kernels, then WebGPU.
fn series() -> Vec<String> {
    Backend::available().into_iter().map(|b| b.name().to_string()).chain(["webgpu".to_string()]).collect()
}

/// `rates`: every benchmark of this tab's visit (format and shape, backend, Gweights/s), kept
/// across problems for the chart.
#[component]
pub fn Bench(problem: Arc<Problem>, rates: RwSignal<Rates>) -> impl IntoView {
    let running = RwSignal::new(false);
    let results = RwSignal::new(None::<Result<Vec<Result_>, String>>);
    let weights = (problem.m * problem.k) as f64;
    let group = format!("{} {}×{}", problem.format.name(), problem.m, problem.k);
    Effect::new(move |_| {
        results.with(|r| {
            if let Some(Ok(rows)) = r {
                rates.update(|rates| rows.iter().for_each(|r| rates.record(&group, r.backend, weights / r.ms / 1e6)));
            }
        })
    });
    let chart = Signal::derive(move || rates.with(|r| r.groups(&series())));
    let page = PageGpu::get();
    // "all", or one backend's name.
    let choice = RwSignal::new("all".to_string());
    let run = {
        let p = problem.clone();
        move |_| {
            running.set(true);
            results.set(None);
            let p = p.clone();
            let which = choice.get_untracked();
            let wants = move |name: &str| which == "all" || which == name;
            // Let the page paint "running…" before the main thread is busy for a few seconds.
            set_timeout(
                move || {
                    let cpu = measure(&p, &wants);
                    let ok = cpu.is_ok();
                    results.set(Some(cpu));
                    match page.gpu().filter(|_| ok && wants("webgpu")) {
                        None => running.set(false),
                        Some(gpu) => spawn_local(async move {
                            let row = measure_gpu(&gpu, &p).await;
                            results.update(|r| {
                                if let Some(Ok(rows)) = r {
                                    match row {
                                        Ok(row) => rows.push(row),
                                        Err(e) => *r = Some(Err(format!("webgpu: {e}"))),
                                    }
                                }
                            });
                            running.set(false);
                        }),
                    }
                },
                Duration::from_millis(30),
            );
        }
    };
    let table = move || {
        results.get().map(|r| match r {
            Err(e) => view! { <p class="error">{e}</p> }.into_any(),
            Ok(rows) => {
                let scalar = rows.iter().find(|r| r.backend == "scalar").map(|r| r.ms).unwrap_or(f64::NAN);
                view! {
                    <table class="outputs" data-testid="bench-results">
                        <thead>
                            <tr>
                                <th>"backend"</th>
                                <th>"ms per GEMV"</th>
                                <th>"Gweights/s"</th>
                                <th>"× scalar"</th>
                                <th>"GPU ms (timestamps)"</th>
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
                                            <td class="num">{if scalar.is_nan() { "-".into() } else { format!("{:.2}", scalar / r.ms) }}</td>
                                            <td class="num">{r.gpu_ms.map(|g| format!("{g:.4}")).unwrap_or_else(|| "-".into())}</td>
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
            <h3>"Run it here: wasm scalar, simd128 and WebGPU"</h3>
            <GpuLine />
            <p>
                {format!(
                    "{} GEMV of {}×{}, including the table build (activation quantisation for I2_S); median of {BATCHES} batches of ≥ {BATCH_MS} ms, measured in this tab.",
                    problem.format.name(),
                    problem.m,
                    problem.k,
                )}
            </p>
            <label>
                "backend "
                <select data-testid="bench-backend" prop:disabled=move || running.get()
                    on:change=move |ev| choice.set(event_target_value(&ev))>
                    <option value="all" selected=true>"all"</option>
                    {Backend::available()
                        .into_iter()
                        .map(|b| view! { <option value=b.name()>{b.name()}</option> })
                        .collect_view()}
                    <option value="webgpu" prop:disabled=move || !page.gpu_ready()>"webgpu"</option>
                </select>
            </label>
            " "
            <button data-testid="bench-run" on:click=run disabled=move || running.get()>
                {move || if running.get() { "running…" } else { "benchmark" }}
            </button>
            {table}
            <BarChart title="kernel throughput per format and shape (every benchmark of this visit)" unit="Gweights/s"
                series=series() groups=chart testid="bitnet-bench-chart"
                empty="press benchmark: each format and shape measured adds its bars here" />
        </div>
    }
}

fn measure(p: &Problem, wants: &dyn Fn(&str) -> bool) -> Result<Vec<Result_>, String> {
    let perf = window().performance().ok_or("this browser has no performance clock")?;
    let mut now = || perf.now();
    // The scalar output the problem already holds is what every backend must reproduce.
    let reference = &p.output;
    let mut rows = Vec::new();
    for backend in Backend::available().into_iter().filter(|b| wants(b.name())) {
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
        rows.push(Result_ { backend: backend.name(), ms, gpu_ms: None, identical });
    }
    Ok(rows)
}

/// The same GEMV on the page's WebGPU adapter: the matrix uploaded once, then each call
/// quantises (or builds tables), uploads them, dispatches and reads back, as `measure` times
/// the wasm kernels with their tables.
async fn measure_gpu(gpu: &Gpu, p: &Problem) -> Result<Result_, String> {
    let perf = window().performance().ok_or("this browser has no performance clock")?;
    let matrix = match &p.packed {
        Packed::I2s(m) => GpuMatrix::i2s(gpu, m),
        Packed::Tl1(m, _) => GpuMatrix::tl1(gpu, m),
        Packed::Tl2(m, _) => GpuMatrix::tl2(gpu, m),
    }
    .map_err(|e| e.to_string())?;
    let mut y = vec![0f32; p.m];
    // Warm-up (pipeline and buffer creation are not the kernel), and the output to check.
    matrix.gemm(gpu, &p.x, &mut y).await.map_err(|e| e.to_string())?;
    let identical = y.iter().zip(&p.output).all(|(a, b)| a.to_bits() == b.to_bits());
    let (mut wall, mut on_gpu) = (Vec::new(), Vec::new());
    for _ in 0..GPU_CALLS {
        let start = perf.now();
        let ns = matrix.gemm(gpu, &p.x, &mut y).await.map_err(|e| e.to_string())?;
        wall.push(perf.now() - start);
        on_gpu.extend(ns.map(|ns| ns / 1e6));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let ms = median(&mut wall).unwrap_or(f64::NAN);
    Ok(Result_ { backend: "webgpu", ms, gpu_ms: median(&mut on_gpu), identical })
}
