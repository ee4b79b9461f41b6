//! `native-host serve`: the websocket bridge.
//!
//! Security model (the bridge can load programs into the kernel):
//! - it binds to loopback unless told otherwise;
//! - [`handshake`] refuses upgrades whose `Origin` is not the playground's, and those without the
//!   session token;
//! - requests only open files through [`crate::files::Roots`];
//! - every connection has bounded queues and frame sizes ([`connection`]), so a hostile or broken
//!   client gets an error frame or a clean close, never the server's attention forever.

pub mod connection;
pub mod ebpf_run;
pub mod esp32_run;
pub mod handshake;
pub mod job;
pub mod qwengpu_chat;
pub mod requests;

use crate::files::Roots;
use kernels_wasm::protocol::Capabilities;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connections served at once; more are answered 503 at the upgrade.
pub const MAX_CONNECTIONS: usize = 32;
/// A client has this long to finish the HTTP upgrade and, after it, to send its hello.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The playground's origins when it runs under `cargo xtask serve` / `trunk serve`.
pub const DEFAULT_ORIGINS: &[&str] = &["http://127.0.0.1:8080", "http://localhost:8080"];

#[derive(Debug, Clone)]
pub struct Config {
    pub token: String,
    pub allowed_origins: Vec<String>,
    pub roots: Roots,
    pub capabilities: Capabilities,
    pub host_version: String,
    /// Held by the one eBPF run the host allows at a time.
    pub ebpf_run: Arc<std::sync::Mutex<()>>,
    /// Held by the one ESP32 cluster run the host allows at a time (it starts node processes).
    pub esp32_run: Arc<std::sync::Mutex<()>>,
    /// Whether CUDA source is also screened line by line before the sandboxed compiler sees it.
    pub include_filter: crate::qwengpu::Filter,
    /// The host's one conversation with the spliced model, and the lock a turn holds.
    pub qwengpu_chat: qwengpu_chat::ChatSlot,
}

/// Accepts connections until the returned future is dropped.
pub async fn serve(listener: TcpListener, config: Config) {
    let config = Arc::new(config);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                crate::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let config = Arc::clone(&config);
        let slot = Arc::clone(&slots).try_acquire_owned().ok();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            connection::run(stream, peer, config, slot).await;
        });
    }
}

/// Where the websocket is, as printed for users: `ws://ADDR/ws`.
pub fn ws_url(addr: SocketAddr) -> String {
    format!("ws://{addr}{}", kernels_wasm::protocol::WS_PATH)
}
