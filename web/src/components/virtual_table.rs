//! A table of any length that keeps only the rows in view in the DOM (DeltaNet state rows,
//! long traces).

use crate::logic::virtual_list::visible_rows;
use leptos::prelude::*;
use std::sync::Arc;

const ROW_PX: f64 = 24.0;
const VIEW_PX: f64 = 288.0;
const OVERSCAN: usize = 4;

/// Renders cell text on demand: `(row, column) -> text`.
pub type CellFn = Arc<dyn Fn(usize, usize) -> String + Send + Sync>;

#[component]
pub fn VirtualTable(
    columns: Vec<&'static str>,
    #[prop(into)] rows: Signal<usize>,
    cell: CellFn,
    /// The columns' CSS grid widths, where the stylesheet's three columns do not fit.
    #[prop(optional)]
    widths: Option<&'static str>,
) -> impl IntoView {
    let grid = widths.map(|w| format!("grid-template-columns: {w}")).unwrap_or_default();
    let wide = if widths.is_some() { "max-width: none" } else { "" };
    let row_grid = grid.clone();
    let scroll_top = RwSignal::new(0.0f64);
    let ncols = columns.len();
    let window_rows = move || visible_rows(scroll_top.get(), VIEW_PX, ROW_PX, rows.get(), OVERSCAN);
    view! {
        <div class="vtable" data-testid="vtable" style=wide>
            <div class="vtable-head" style=grid>
                {columns.into_iter().map(|c| view! { <span>{c}</span> }).collect_view()}
            </div>
            <div
                class="vtable-body"
                data-testid="vtable-body"
                style=format!("height:{VIEW_PX}px")
                on:scroll=move |ev| {
                    let el = event_target::<web_sys::HtmlElement>(&ev);
                    scroll_top.set(el.scroll_top() as f64);
                }
            >
                <div class="vtable-space" style=move || format!("height:{}px", rows.get() as f64 * ROW_PX)>
                    {move || {
                        let cell = Arc::clone(&cell);
                        let row_grid = row_grid.clone();
                        window_rows()
                            .map(move |r| {
                                let cells = (0..ncols).map(|c| view! { <span>{cell(r, c)}</span> }).collect_view();
                                view! {
                                    <div class="vtable-row" data-row=r style=format!("top:{}px; {row_grid}", r as f64 * ROW_PX)>
                                        {cells}
                                    </div>
                                }
                            })
                            .collect_view()
                    }}
                </div>
            </div>
            <div class="readout" data-testid="vtable-readout">
                {move || {
                    let w = window_rows();
                    format!("{} rows; {}–{} in the DOM", rows.get(), w.start, w.end)
                }}
            </div>
        </div>
    }
}
