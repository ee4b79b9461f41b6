//! The substrates playground: a Leptos CSR app, built for the browser by Trunk.
//!
//! `logic` is plain Rust (tested natively and in the browser); everything else is UI and only
//! exists on wasm32.

pub mod logic;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod bridge;
#[cfg(target_arch = "wasm32")]
mod components;
#[cfg(target_arch = "wasm32")]
mod gpu;
#[cfg(target_arch = "wasm32")]
mod link;
#[cfg(target_arch = "wasm32")]
mod tabs;

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("web is the browser playground: run `cargo xtask serve` (or `trunk serve --offline`) instead");
    std::process::exit(2);
}
