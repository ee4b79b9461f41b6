use super::NotBuilt;
use leptos::prelude::*;

#[component]
pub fn Esp32Tab() -> impl IntoView {
    view! {
        <NotBuilt issue=7 what="ESP32-S3 cluster: BitNet layers split across microcontrollers">
            <p>
                "Will show a layer split across nodes (real boards over serial, or emulated nodes run "
                "by the bridge, always labelled as such), the frames on the wire and each node's memory budget."
            </p>
        </NotBuilt>
    }
}
