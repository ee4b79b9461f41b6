//! Spans on a shared time axis, packed into lanes, with a hover read-out (operator traces).

use crate::logic::timeline::{format_ns, layout, Span};
use leptos::prelude::*;

#[component]
pub fn Timeline(#[prop(into)] spans: Signal<Vec<Span>>, #[prop(into)] label: String) -> impl IntoView {
    let hover = RwSignal::new(None::<usize>);
    const LANE_PX: usize = 22;
    view! {
        <figure class="timeline" data-testid="timeline">
            <figcaption>{label}</figcaption>
            {move || {
                spans
                    .with(|spans| {
                        let (placed, lanes) = layout(spans);
                        let total = spans.iter().map(|s| s.end_ns).max().unwrap_or(0)
                            - spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
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
                            <div class="timeline-axis">
                                <span>"0"</span>
                                <span>{format_ns(total)}</span>
                            </div>
                        }
                    })
            }}
            <div class="readout" data-testid="timeline-readout">
                {move || {
                    hover
                        .get()
                        .and_then(|i| {
                            spans
                                .with(|s| {
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
