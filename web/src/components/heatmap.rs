//! A matrix drawn on a canvas, one pixel per cell scaled up by CSS, with a hover read-out of
//! row, column and value, and an optional highlighted cell (the step controls drive it).

use crate::logic::heatmap::{cell_at, max_abs, rgba};
use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::{Clamped, JsCast};
use web_sys::{CanvasRenderingContext2d, ImageData, MouseEvent};

#[component]
pub fn Heatmap(
    rows: usize,
    cols: usize,
    /// Row-major, `rows * cols` values.
    #[prop(into)]
    values: Signal<Vec<f32>>,
    #[prop(into)] label: String,
    #[prop(into, optional)] highlight: Signal<Option<(usize, usize)>>,
    /// Drawn width in CSS pixels.
    #[prop(default = 480)]
    width: u32,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let hover = RwSignal::new(None::<(usize, usize, f32)>);
    let height = ((width as f64) * rows as f64 / cols.max(1) as f64).ceil().max(1.0) as u32;

    Effect::new(move |_| {
        let Some(canvas) = canvas.get() else { return };
        values.with(|v| {
            if v.len() != rows * cols {
                leptos::logging::warn!("heatmap {rows}x{cols} got {} values", v.len());
                return;
            }
            let pixels = rgba(v, max_abs(v));
            let ctx =
                canvas.get_context("2d").ok().flatten().and_then(|c| c.dyn_into::<CanvasRenderingContext2d>().ok());
            let image = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&pixels), cols as u32, rows as u32);
            if let (Some(ctx), Ok(image)) = (ctx, image) {
                let _ = ctx.put_image_data(&image, 0.0, 0.0);
            }
        });
    });

    let on_move = move |ev: MouseEvent| {
        let Some(canvas) = canvas.get_untracked() else { return };
        let rect = canvas.get_bounding_client_rect();
        let (x, y) = (ev.client_x() as f64 - rect.left(), ev.client_y() as f64 - rect.top());
        let cell = cell_at(x, y, rect.width(), rect.height(), rows, cols);
        hover.set(
            cell.map(|(r, c)| (r, c, values.with_untracked(|v| v.get(r * cols + c).copied().unwrap_or(f32::NAN)))),
        );
    };

    // The highlight box, in percent of the grid so it follows CSS scaling.
    let highlight_style = move || {
        highlight.get().map(|(r, c)| {
            format!(
                "left:{}%;top:{}%;width:{}%;height:{}%",
                100.0 * c as f64 / cols as f64,
                100.0 * r as f64 / rows as f64,
                100.0 / cols as f64,
                100.0 / rows as f64
            )
        })
    };

    view! {
        <figure class="heatmap" data-testid="heatmap" data-rows=rows data-cols=cols>
            <figcaption>{label}" "<small>{format!("{rows}×{cols}")}</small></figcaption>
            <div class="heatmap-frame" style=format!("width:{width}px;height:{height}px")>
                <canvas
                    node_ref=canvas
                    width=cols
                    height=rows
                    style=format!("width:{width}px;height:{height}px")
                    on:mousemove=on_move
                    on:mouseleave=move |_| hover.set(None)
                ></canvas>
                <Show when=move || highlight.get().is_some()>
                    <div class="heatmap-highlight" data-testid="heatmap-highlight" style=highlight_style></div>
                </Show>
            </div>
            <div class="readout" data-testid="heatmap-readout">
                {move || match hover.get() {
                    Some((r, c, v)) => format!("row {r}, col {c}: {v}"),
                    None => "hover a cell".to_string(),
                }}
            </div>
        </figure>
    }
}
