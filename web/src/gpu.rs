//! The page's WebGPU adapter: requested once when the app starts and shared by the tabs
//! (a context). Where the browser has none, the tabs say so and run on wasm only.

use kernels_wasm::gpu::Gpu;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::rc::Rc;

#[derive(Debug, Clone, PartialEq)]
pub enum GpuStatus {
    Requesting,
    /// The adapter, as `AdapterSummary` prints it.
    Ready(String),
    /// Why there is none.
    Unavailable(String),
}

/// The adapter (once ready) and its status. wgpu's browser objects are not `Send`: the device
/// lives in local storage, the status in an ordinary signal.
#[derive(Clone, Copy)]
pub struct PageGpu {
    gpu: StoredValue<Option<Rc<Gpu>>, LocalStorage>,
    pub status: RwSignal<GpuStatus>,
}

impl PageGpu {
    /// Requests the adapter and provides the context.
    pub fn provide() {
        let page = PageGpu { gpu: StoredValue::new_local(None), status: RwSignal::new(GpuStatus::Requesting) };
        provide_context(page);
        spawn_local(async move {
            match Gpu::new().await {
                Ok(gpu) => {
                    let name = gpu.adapter.to_string();
                    page.gpu.set_value(Some(Rc::new(gpu)));
                    page.status.set(GpuStatus::Ready(name));
                }
                Err(e) => page.status.set(GpuStatus::Unavailable(e.to_string())),
            }
        });
    }

    pub fn get() -> PageGpu {
        expect_context::<PageGpu>()
    }

    pub fn gpu(&self) -> Option<Rc<Gpu>> {
        self.gpu.get_value()
    }

    /// Whether the adapter is ready (reactive: for options that need it).
    pub fn gpu_ready(&self) -> bool {
        matches!(self.status.get(), GpuStatus::Ready(_))
    }
}

/// One line naming the adapter, or why the tab runs on wasm only.
#[component]
pub fn GpuLine() -> impl IntoView {
    let page = PageGpu::get();
    move || {
        match page.status.get() {
        GpuStatus::Requesting => view! { <p data-testid="gpu-status" data-state="requesting">"WebGPU: asking the browser for an adapter …"</p> }.into_any(),
        GpuStatus::Ready(name) => view! { <p data-testid="gpu-status" data-state="ready">"WebGPU adapter: " {name}</p> }.into_any(),
        GpuStatus::Unavailable(why) => view! {
            <p data-testid="gpu-status" data-state="unavailable">
                {format!("WebGPU: not available in this browser ({why}); this tab runs on wasm only.")}
            </p>
        }
        .into_any(),
    }
    }
}
