use super::NotBuilt;
use crate::bridge::Bridge;
use leptos::prelude::*;

#[component]
pub fn EbpfTab() -> impl IntoView {
    let bridge = expect_context::<Bridge>();
    let host = move || {
        bridge.status.with(|s| match s.hello() {
            Some(h) if h.capabilities.ebpf.available => {
                format!("This host can load BPF programs: {}", h.capabilities.ebpf.detail)
            }
            Some(h) => format!("This host cannot load BPF programs: {}", h.capabilities.ebpf.detail),
            None => "No bridge connected: this tab needs native-host (cargo xtask serve).".to_string(),
        })
    };
    view! {
        <NotBuilt issue=4 what="qwen3-ebpf: a Qwen3 forward pass in verified eBPF programs">
            <p>
                "Will stream operator traces from the bridge: each matmul, norm, RoPE and attention "
                "step runs as a BPF program inside the Linux kernel, bit-identical to a Rust golden model."
            </p>
            <p class="host-capability" data-testid="ebpf-host">{host}</p>
        </NotBuilt>
    }
}
