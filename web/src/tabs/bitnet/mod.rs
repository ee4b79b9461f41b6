//! The BitNet LUT tab: pick a format, a shape and weights; step through the kernel on small
//! shapes; run and benchmark it (wasm scalar vs simd128) on any shape; run a whole model.

mod bench;
mod model;
mod stepper;
mod table;

use crate::components::NumberInput;
use crate::link::PageLink;
use crate::logic::bitnet::{shape_name, shape_of, Format, Problem, WeightSource, SHAPES};
use crate::logic::plot::Rates;
use leptos::prelude::*;
use std::sync::Arc;

/// The current problem; equal only to itself, so a rebuild always re-renders.
#[derive(Clone)]
pub struct Current(pub Arc<Problem>);

impl PartialEq for Current {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[component]
pub fn BitNetTab() -> impl IntoView {
    // The choices start from the link (format=TL2&shape=768x3072&weights=f32&seed=7).
    let link = PageLink::get();
    let format = RwSignal::new(link.choice("format", Format::parse, Format::Tl1, Format::Tl1.name()));
    let (m0, k0) = SHAPES[0];
    let shape = RwSignal::new(link.choice("shape", shape_of, SHAPES[0], &shape_name(m0, k0)));
    let source =
        RwSignal::new(link.choice("weights", WeightSource::parse, WeightSource::Ternary, WeightSource::Ternary.name()));
    let seed = RwSignal::new(link.choice("seed", |s| s.parse().ok(), 1u64, "1"));
    Effect::new(move |first: Option<()>| {
        let (m, k) = shape.get();
        let (f, w, s) = (format.get(), source.get(), seed.get());
        // Nothing is written until the user chooses: an untouched tab keeps a bare `#bitnet`.
        if first.is_some() {
            link.set("format", f.name());
            link.set("shape", &shape_name(m, k));
            link.set("weights", w.name());
            link.set("seed", &s.to_string());
        }
    });
    let rates = RwSignal::new(Rates::default());
    let problem = Memo::new(move |_| {
        let (m, k) = shape.get();
        Problem::new(format.get(), m, k, source.get(), seed.get())
            .map(|p| Current(Arc::new(p)))
            .map_err(|e| e.to_string())
    });

    view! {
        <section class="bitnet" data-testid="bitnet-tab">
            <h2>"BitNet b1.58 LUT kernels"</h2>
            <p class="lede">
                "Ternary weights packed as bitnet.cpp packs them, lookup tables built from the int8 activations, and "
                <code>"qgemm_lut"</code>
                " run by this page's WebAssembly — the same Rust kernels that run natively, stepped lookup by lookup."
            </p>
            <div class="controls">
                <label>
                    "format "
                    <select
                        data-testid="bitnet-format"
                        on:change=move |ev| {
                            if let Some(f) = Format::parse(&event_target_value(&ev)) {
                                format.set(f);
                            }
                        }
                    >
                        {Format::ALL
                            .map(|f| {
                                view! { <option value=f.name() selected=format.get_untracked() == f>{f.name()}</option> }
                            })
                            .collect_view()}
                    </select>
                </label>
                <label>
                    "shape M×K "
                    <select
                        data-testid="bitnet-shape"
                        on:change=move |ev| {
                            if let Some(s) = SHAPES.get(event_target_value(&ev).parse::<usize>().unwrap_or(0)) {
                                shape.set(*s);
                            }
                        }
                    >
                        {SHAPES
                            .iter()
                            .enumerate()
                            .map(|(i, (m, k))| {
                                let what = if m * k <= crate::logic::bitnet::MAX_STEP_WEIGHTS { "step" } else { "run" };
                                let selected = shape.get_untracked() == (*m, *k);
                                view! { <option value=i.to_string() selected=selected>{format!("{m}×{k} ({what})")}</option> }
                            })
                            .collect_view()}
                    </select>
                </label>
                <label>
                    "weights "
                    <select
                        data-testid="bitnet-source"
                        on:change=move |ev| {
                            source.set(WeightSource::parse(&event_target_value(&ev)).unwrap_or(WeightSource::Ternary))
                        }
                    >
                        <option value="ternary" selected=source.get_untracked() == WeightSource::Ternary>
                            "random ternary"
                        </option>
                        <option value="f32" selected=source.get_untracked() == WeightSource::QuantisedF32>
                            "random f32, absmean-quantised here"
                        </option>
                    </select>
                </label>
                <NumberInput label="seed" testid="bitnet-seed" value=seed min=0 max=u64::MAX/>
            </div>
            {move || match problem.get() {
                Err(e) => view! { <p class="error" data-testid="bitnet-error">{e}</p> }.into_any(),
                Ok(Current(p)) => {
                    view! {
                        <Summary problem=p.clone() />
                        <stepper::Stepper problem=p.clone() />
                        <bench::Bench problem=p rates=rates />
                    }
                        .into_any()
                }
            }}
            <model::ModelRun />
        </section>
    }
}

/// Format facts and the kernel's output against the f32 reference.
#[component]
fn Summary(problem: Arc<Problem>) -> impl IntoView {
    let p = &problem;
    let (y, reference) = (&p.output, &p.reference);
    let worst = (0..p.m)
        .map(|r| ((y[r] - reference[r]).abs(), p.error_bound(r)))
        .fold((0f32, true), |(e, ok), (d, b)| (e.max(d), ok && d <= b * 1.001 + 1e-5));
    let layout = match &p.packed {
        crate::logic::bitnet::Packed::Tl1(m, _) => format!(
            "TL1: {} bytes of 4-bit pair indices (2 bits/weight), BM={} BK={} bm={}, {} pair tables of 32 bytes",
            m.packed.len(),
            m.geometry.tile.bm_tile,
            m.geometry.tile.bk,
            m.geometry.tile.bm,
            p.k / 2
        ),
        crate::logic::bitnet::Packed::Tl2(m, _) => format!(
            "TL2: {} bytes (magnitudes {}, sign bits {}, two-weight tail {}; {:.2} bits/weight), BM={} BK={}, three_k={} two_k={}",
            m.packed.len(),
            m.geometry.mag_bytes(),
            m.geometry.sign_bytes(),
            m.geometry.tail_bytes(),
            m.packed.len() as f64 * 8.0 / (p.m * p.k) as f64,
            m.geometry.tile.bm_tile,
            m.geometry.tile.bk,
            m.geometry.three_k,
            m.geometry.two_k
        ),
        crate::logic::bitnet::Packed::I2s(m) => {
            format!("I2_S: {} bytes of 2-bit codes in 128-weight blocks, multiply-add kernel (no tables)", m.codes.len())
        }
    };
    view! {
        <div class="demo" data-testid="bitnet-summary">
            <p>{layout}</p>
            <p>
                {format!(
                    "weight scale β = {:.5}, activation scale 127/max|x| = {:.4}",
                    p.weights.scale,
                    p.acts.scale,
                )}
            </p>
            <p data-testid="bitnet-accuracy" data-ok=worst.1.to_string()>
                {format!(
                    "kernel output vs f32 reference (same ternary weights, unquantised x): max |Δ| = {:.5}; {} the activation-quantisation bound β·Σ|w|·0.5/s in every row",
                    worst.0,
                    if worst.1 { "within" } else { "OUTSIDE" },
                )}
            </p>
        </div>
    }
}
