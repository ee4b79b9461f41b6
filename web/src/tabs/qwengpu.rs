use super::NotBuilt;
use leptos::prelude::*;

#[component]
pub fn QwenGpuTab() -> impl IntoView {
    view! {
        <NotBuilt issue=5 what="qwenGPU: a SIMT machine compiled into Gated DeltaNet layers">
            <p>
                "Will run in this page: CUDA kernels lowered from PTX to a 4-lane SIMT machine whose "
                "registers and memory live in DeltaNet state rows, stepped one warp-block at a time, "
                "checked against a plain interpreter after every step."
            </p>
        </NotBuilt>
    }
}
