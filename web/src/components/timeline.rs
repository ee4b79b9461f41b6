//! Spans on a shared time axis, packed into lanes, with a hover read-out (operator traces).

use crate::logic::timeline::{format_ns, layout_in, window, Span, Zoom};
use leptos::prelude::*;

#[component]
pub fn Timeline(#[prop(into)] spans: Signal<Vec<Span>>, #[prop(into)] label: String) -> impl IntoView {
    let hover = RwSignal::new(None::<usize>);
    let zoom = RwSignal::new(Zoom::default());
    // What is on screen: the spans inside the zoom window, clipped, and the window's ends.
    let shown = Memo::new(move |_| spans.with(|s| window(s, zoom.get())));
    const LANE_PX: usize = 22;
    let button = move |label: &'static str, testid: &'static str, f: fn(Zoom) -> Zoom| {
        view! { <button class="zoom" data-testid=testid on:click=move |_| zoom.update(|z| *z = f(*z))>{label}</button> }
    };
    view! {
        <figure class="timeline" data-testid="timeline">
            <figcaption>
                <span data-testid="timeline-label">{label}</span>
                <span class="zoom-controls">
                    {button("+", "timeline-zoom-in", |z| z.scaled(0.5))}
                    {button("−", "timeline-zoom-out", |z| z.scaled(2.0))}
                    {button("◀", "timeline-pan-left", |z| z.panned(-0.5))}
                    {button("▶", "timeline-pan-right", |z| z.panned(0.5))}
                    {button("reset", "timeline-zoom-reset", |_| Zoom::default())}
                    <span data-testid="timeline-zoom">{move || format!("×{:.0}", zoom.get().magnification())}</span>
                </span>
            </figcaption>
            {move || {
                shown
                    .with(|(spans, t0, t1)| {
                        let (placed, lanes) = layout_in(spans, *t0, *t1);
                        let (t0, t1) = (*t0, *t1);
                        view! {
                            <div class="timeline-lanes" style=format!("height:{}px", lanes.max(1) * LANE_PX)>
                                {placed
                                    .into_iter()
                                    .map(|p| {
                                        let s = &spans[p.index];
                                        let style = format!(
                                            "left:{:.4}%;width:max({:.4}%,2px);top:{}px;background:hsl({},55%,60%)",
                                            p.left * 100.0,
                                            p.width * 100.0,
                                            p.lane * LANE_PX,
                                            (s.name.bytes().map(u32::from).sum::<u32>() * 47) % 360,
                                        );
                                        let i = p.index;
                                        view! {
                                            <div
                                                class="span"
                                                data-testid="timeline-span"
                                                style=style
                                                on:mouseenter=move |_| hover.set(Some(i))
                                                on:mouseleave=move |_| hover.set(None)
                                            >
                                                {s.name.clone()}
                                            </div>
                                        }
                                    })
                                    .collect_view()}
                            </div>
                            <div class="timeline-axis" data-testid="timeline-axis">
                                <span>{format_ns(t0)}</span>
                                <span>{format_ns(t1)}</span>
                            </div>
                        }
                    })
            }}
            <div class="readout" data-testid="timeline-readout">
                {move || {
                    hover
                        .get()
                        .and_then(|i| {
                            shown
                                .with(|(s, _, _)| {
                                    s.get(i)
                                        .map(|s| {
                                            format!(
                                                "{}: {} (at {})",
                                                s.name,
                                                format_ns(s.end_ns.saturating_sub(s.start_ns)),
                                                format_ns(s.start_ns),
                                            )
                                        })
                                })
                        })
                        .unwrap_or_else(|| "hover a span".into())
                }}
            </div>
        </figure>
    }
}
