//! The page: a header with the bridge status, a tab bar, and one tab at a time.

use crate::bridge::{Bridge, BridgeStatus};
use crate::link::PageLink;
use crate::tabs;
use kernels_wasm::protocol::ProbeResult;
use leptos::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    BitNet,
    QwenGpu,
    Ebpf,
    Esp32,
    Components,
}

impl Tab {
    pub const ALL: [Tab; 5] = [Tab::BitNet, Tab::QwenGpu, Tab::Ebpf, Tab::Esp32, Tab::Components];

    pub fn label(self) -> &'static str {
        match self {
            Tab::BitNet => "BitNet LUT",
            Tab::QwenGpu => "qwenGPU",
            Tab::Ebpf => "eBPF",
            Tab::Esp32 => "ESP32 cluster",
            Tab::Components => "Components",
        }
    }

    /// Stable id for the URL hash and for tests.
    pub fn slug(self) -> &'static str {
        match self {
            Tab::BitNet => "bitnet",
            Tab::QwenGpu => "qwengpu",
            Tab::Ebpf => "ebpf",
            Tab::Esp32 => "esp32",
            Tab::Components => "components",
        }
    }

    fn from_slug(slug: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.slug() == slug)
    }
}

#[component]
pub fn App() -> impl IntoView {
    let bridge = Bridge::start();
    provide_context(bridge);
    crate::gpu::PageGpu::provide();
    let link = PageLink::provide();
    let initial = match link.tab().as_str() {
        "" => Tab::BitNet,
        slug => Tab::from_slug(slug).unwrap_or_else(|| {
            link.note(format!("the link's tab {slug:?} does not exist; showing {}", Tab::BitNet.label()));
            Tab::BitNet
        }),
    };
    let tab = RwSignal::new(initial);
    Effect::new(move |_| link.set_tab(tab.get().slug()));

    view! {
        <Header />
        <nav class="tabs" role="tablist">
            {Tab::ALL
                .into_iter()
                .map(|t| {
                    view! {
                        <button
                            role="tab"
                            data-tab=t.slug()
                            class:active=move || tab.get() == t
                            aria-selected=move || (tab.get() == t).to_string()
                            on:click=move |_| tab.set(t)
                        >
                            {t.label()}
                        </button>
                    }
                })
                .collect_view()}
        </nav>
        <Show when=move || link.notes.with(|n| !n.is_empty())>
            <p class="note link-note" data-testid="link-note">
                {move || link.notes.get().join("; ")}
                " "
                <button on:click=move |_| link.notes.set(Vec::new())>"dismiss"</button>
            </p>
        </Show>
        <main data-panel=move || tab.get().slug()>
            {move || match tab.get() {
                Tab::BitNet => tabs::bitnet::BitNetTab().into_any(),
                Tab::QwenGpu => tabs::qwengpu::QwenGpuTab().into_any(),
                Tab::Ebpf => tabs::ebpf::EbpfTab().into_any(),
                Tab::Esp32 => tabs::esp32::Esp32Tab().into_any(),
                Tab::Components => tabs::components::ComponentsTab().into_any(),
            }}
        </main>
    }
}

#[component]
fn Header() -> impl IntoView {
    let bridge = expect_context::<Bridge>();
    let status = bridge.status;
    let state = move || status.with(BridgeStatus::slug);
    view! {
        <header>
            <h1>"substrates"</h1>
            <span class="subtitle">"LLM arithmetic on unusual substrates"</span>
            <div class="bridge" data-testid="bridge-status" data-state=state>
                <span class="dot"></span>
                <span class="state">{move || status.with(BridgeStatus::summary)}</span>
                {move || {
                    status
                        .with(|s| s.hello().cloned())
                        .map(|hello| {
                            let caps = hello.capabilities;
                            let rtt = bridge.rtt_ms;
                            view! {
                                <span class="host" data-testid="host-version">
                                    "native-host " {hello.host_version}
                                </span>
                                <CapBadge name="eBPF" testid="cap-ebpf" probe=caps.ebpf />
                                <CapBadge name="clang-19" testid="cap-clang" probe=caps.clang />
                                {move || {
                                    rtt.get()
                                        .map(|ms| {
                                            view! { <span class="rtt" data-testid="rtt">{format!("rtt {ms:.1} ms")}</span> }
                                        })
                                }}
                            }
                        })
                }}
            </div>
        </header>
    }
}

/// One capability of the host: ✓ or ✗, with the probe's detail as the tooltip.
#[component]
fn CapBadge(name: &'static str, testid: &'static str, probe: ProbeResult) -> impl IntoView {
    let mark = if probe.available { "✓" } else { "✗" };
    view! {
        <span class="cap" data-testid=testid data-available=probe.available.to_string() title=probe.detail>
            {format!("{name} {mark}")}
        </span>
    }
}
