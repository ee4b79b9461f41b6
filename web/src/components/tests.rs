//! The components mounted into a real DOM (headless Chromium, wasm-bindgen-test): what they
//! draw and how they answer clicks and pointer moves.

use super::{Heatmap, StepControls};
use crate::logic::heatmap::{diverging, max_abs};
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement, HtmlElement, MouseEvent, MouseEventInit};

fn container() -> HtmlElement {
    let doc = document();
    let div = doc.create_element("div").unwrap();
    doc.body().unwrap().append_child(&div).unwrap();
    div.unchecked_into()
}

fn find<T: JsCast>(root: &HtmlElement, selector: &str) -> T {
    root.query_selector(selector).unwrap().unwrap_or_else(|| panic!("no {selector}")).unchecked_into()
}

fn text(root: &HtmlElement, selector: &str) -> String {
    find::<HtmlElement>(root, selector).text_content().unwrap_or_default()
}

#[wasm_bindgen_test]
async fn heatmap_draws_each_cell_and_reads_out_the_hovered_one() {
    let root = container();
    let values: Vec<f32> = (0..6).map(|v| v as f32 * 3.0 - 7.0).collect(); // 2 rows × 3 cols
    let shown = values.clone();
    let _mounted = leptos::mount::mount_to(root.clone(), move || {
        view! { <Heatmap rows=2 cols=3 values=Signal::stored(shown) label="t" width=300 /> }
    });
    leptos::task::tick().await;

    // One canvas pixel per cell, coloured exactly as the colour map says.
    let canvas: HtmlCanvasElement = find(&root, "canvas");
    assert_eq!((canvas.width(), canvas.height()), (3, 2));
    let ctx: CanvasRenderingContext2d = canvas.get_context("2d").unwrap().unwrap().unchecked_into();
    let pixels = ctx.get_image_data(0.0, 0.0, 3.0, 2.0).unwrap().data().0;
    let scale = max_abs(&values);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(pixels[i * 4..i * 4 + 4], diverging(*v, scale), "cell {i}");
    }

    // The pointer over the centre of (row 1, col 2) names that cell and its value.
    let rect = canvas.get_bounding_client_rect();
    let init = MouseEventInit::new();
    init.set_client_x((rect.left() + rect.width() * 2.5 / 3.0) as i32);
    init.set_client_y((rect.top() + rect.height() * 1.5 / 2.0) as i32);
    canvas.dispatch_event(&MouseEvent::new_with_mouse_event_init_dict("mousemove", &init).unwrap()).unwrap();
    leptos::task::tick().await;
    assert_eq!(text(&root, "[data-testid=heatmap-readout]"), format!("row 1, col 2: {}", values[5]));
    canvas.dispatch_event(&MouseEvent::new("mouseleave").unwrap()).unwrap();
    leptos::task::tick().await;
    assert_eq!(text(&root, "[data-testid=heatmap-readout]"), "hover a cell");
}

#[wasm_bindgen_test]
async fn step_controls_move_the_shared_position() {
    let root = container();
    let position = RwSignal::new(0usize);
    let _mounted =
        leptos::mount::mount_to(root.clone(), move || view! { <StepControls len=5usize position=position /> });
    leptos::task::tick().await;
    let click = |sel: &str| find::<HtmlElement>(&root, sel).click();

    click("[data-testid=step-next]");
    click("[data-testid=step-next]");
    leptos::task::tick().await;
    assert_eq!(position.get_untracked(), 2);
    assert_eq!(text(&root, "[data-testid=step-position]"), "step 3 / 5");
    click("[data-testid=step-back]");
    leptos::task::tick().await;
    assert_eq!(position.get_untracked(), 1);
    // Stepping past the end stays on the last step.
    for _ in 0..10 {
        click("[data-testid=step-next]");
    }
    leptos::task::tick().await;
    assert_eq!(position.get_untracked(), 4);
    // The caller may move the position too; the controls follow.
    position.set(0);
    leptos::task::tick().await;
    assert_eq!(text(&root, "[data-testid=step-position]"), "step 1 / 5");
}
