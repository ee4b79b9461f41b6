//! One module per tab.

pub mod bitnet;
pub mod components;
pub mod ebpf;
pub mod esp32;
pub mod qwengpu;
pub mod qwengpu_layers;

use leptos::prelude::*;

/// The honest placeholder of a tab whose substrate has not landed yet.
#[component]
pub fn NotBuilt(issue: u32, what: &'static str, children: Children) -> impl IntoView {
    view! {
        <section class="empty-state" data-testid="empty-state">
            <h2>{what}</h2>
            <p class="not-built">
                "Not built yet: this tab arrives with issue #" {issue} ". Nothing below is simulated or faked."
            </p>
            {children()}
        </section>
    }
}
