use super::NotBuilt;
use leptos::prelude::*;

#[component]
pub fn BitNetTab() -> impl IntoView {
    view! {
        <NotBuilt issue=3 what="BitNet b1.58 LUT kernels (TL1 / TL2 / I2_S)">
            <p>
                "Will run in this page (wasm scalar and simd128): ternary weights packed as TL1, TL2 and "
                "I2_S, the lookup tables built per activation group, and "<code>"qgemm_lut"</code>
                " stepped lookup by lookup, with the int16 partial sums and int32 accumulators shown "
                "beside an f32 reference."
            </p>
        </NotBuilt>
    }
}
