//! The page's side of the websocket to `native-host`: connect with the session token, keep the
//! connection alive (reconnecting with backoff), expose its state as signals, and route replies
//! to the requests that asked for them. The page works without it; tabs that need the host say so.

use crate::logic::token;
use kernels_wasm::protocol::{ClientMessage, HostHello, Reply, Request, RequestId, ServerMessage, PROTOCOL_VERSION};
use leptos::prelude::*;
use std::collections::HashMap;
use std::time::Duration;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{CloseEvent, MessageEvent, WebSocket};

const TOKEN_KEY: &str = "substrates.token";
const RTT_EVERY: Duration = Duration::from_secs(5);
const MAX_BACKOFF_MS: u32 = 5_000;

#[derive(Debug, Clone, PartialEq)]
pub enum BridgeStatus {
    /// The page was opened without a session token, so there is nothing to connect to.
    NoToken,
    Connecting,
    Connected(HostHello),
    /// The connection was up and dropped; retrying.
    Reconnecting {
        attempt: u32,
        retry_in_ms: u32,
    },
    /// Never reached a bridge; retrying in the background.
    Absent {
        attempt: u32,
        retry_in_ms: u32,
        reason: String,
    },
}

impl BridgeStatus {
    /// "connected" | "connecting" | "reconnecting" | "absent", for styling and tests.
    pub fn slug(&self) -> &'static str {
        match self {
            BridgeStatus::Connected(_) => "connected",
            BridgeStatus::Connecting => "connecting",
            BridgeStatus::Reconnecting { .. } => "reconnecting",
            BridgeStatus::NoToken | BridgeStatus::Absent { .. } => "absent",
        }
    }

    pub fn summary(&self) -> String {
        match self {
            BridgeStatus::NoToken => {
                "bridge absent: no session token (open the URL printed by `cargo xtask serve`); browser-only tabs work"
                    .into()
            }
            BridgeStatus::Connecting => "connecting to bridge…".into(),
            BridgeStatus::Connected(_) => "bridge connected".into(),
            BridgeStatus::Reconnecting { attempt, retry_in_ms } => {
                format!("bridge lost: reconnecting in {:.1} s (attempt {attempt})", *retry_in_ms as f64 / 1000.0)
            }
            BridgeStatus::Absent { retry_in_ms, reason, .. } => {
                format!(
                    "bridge absent ({reason}); retrying in {:.1} s; browser-only tabs work",
                    *retry_in_ms as f64 / 1000.0
                )
            }
        }
    }

    pub fn hello(&self) -> Option<&HostHello> {
        match self {
            BridgeStatus::Connected(h) => Some(h),
            _ => None,
        }
    }
}

type Handler = Box<dyn FnMut(&ServerMessage) -> bool>;

/// A live socket and the JS callbacks attached to it (dropped together).
struct Connection {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
}

#[derive(Clone, Copy)]
pub struct Bridge {
    pub status: RwSignal<BridgeStatus>,
    /// Round trip of the last ping, in milliseconds.
    pub rtt_ms: RwSignal<Option<f64>>,
    token: StoredValue<Option<String>>,
    conn: StoredValue<Option<Connection>, LocalStorage>,
    /// Handlers of running requests; a handler returns true once it has seen its final frame.
    pending: StoredValue<HashMap<RequestId, Handler>, LocalStorage>,
    next_id: StoredValue<RequestId>,
    attempts: StoredValue<u32>,
    ever_connected: StoredValue<bool>,
}

impl Bridge {
    pub fn start() -> Bridge {
        let bridge = Bridge {
            status: RwSignal::new(BridgeStatus::Connecting),
            rtt_ms: RwSignal::new(None),
            token: StoredValue::new(take_token()),
            conn: StoredValue::new_local(None),
            pending: StoredValue::new_local(HashMap::new()),
            next_id: StoredValue::new(1),
            attempts: StoredValue::new(0),
            ever_connected: StoredValue::new(false),
        };
        if bridge.token.get_value().is_none() {
            bridge.status.set(BridgeStatus::NoToken);
            return bridge;
        }
        bridge.connect();
        if let Ok(handle) = set_interval_with_handle(move || bridge.ping(), RTT_EVERY) {
            on_cleanup(move || handle.clear());
        }
        bridge
    }

    /// Asks the bridge to stop a running request; its handler then sees a `cancelled` error.
    pub fn cancel(&self, id: RequestId) {
        let frame = ClientMessage::Cancel { id }.to_json();
        self.conn.with_value(|c| {
            if let Some(c) = c {
                let _ = c.ws.send_with_str(&frame);
            }
        });
    }

    /// Sends a request; `handler` sees its events and its final result or error.
    pub fn request(
        &self,
        request: Request,
        handler: impl FnMut(&ServerMessage) -> bool + 'static,
    ) -> Result<RequestId, String> {
        let id = self.next_id.get_value();
        self.next_id.set_value(id + 1);
        let frame = ClientMessage::Request { id, request }.to_json();
        let sent = self.conn.with_value(|c| match c {
            Some(c) if c.ws.ready_state() == WebSocket::OPEN => {
                c.ws.send_with_str(&frame).map_err(|e| format!("{e:?}"))
            }
            _ => Err("the bridge is not connected".to_string()),
        });
        sent?;
        self.pending.update_value(|p| {
            p.insert(id, Box::new(handler));
        });
        Ok(id)
    }

    fn ping(&self) {
        if self.status.with_untracked(|s| s.hello().is_none()) {
            return;
        }
        let started = now_ms();
        let rtt = self.rtt_ms;
        let _ = self.request(Request::Ping { nonce: 0, delay_ms: 0 }, move |m| {
            if let ServerMessage::Result { result: Reply::Pong { .. }, .. } = m {
                rtt.set(Some(now_ms() - started));
            }
            true
        });
    }

    fn connect(self) {
        let Some(token) = self.token.get_value() else { return };
        let location = window().location();
        let url = token::ws_url(&location.protocol().unwrap_or_default(), &location.host().unwrap_or_default(), &token);
        let ws = match WebSocket::new(&url) {
            Ok(ws) => ws,
            Err(e) => return self.closed(format!("cannot open websocket: {e:?}")),
        };
        let opened = ws.clone();
        let on_open = Closure::<dyn FnMut()>::new(move || {
            let hello = ClientMessage::Hello { protocol: PROTOCOL_VERSION, client: "substrates-web".into() };
            let _ = opened.send_with_str(&hello.to_json());
        });
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
            if let Some(text) = ev.data().as_string() {
                self.on_frame(&text);
            }
        });
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |ev: CloseEvent| {
            let reason = match (ev.code(), ev.reason()) {
                (1006, _) => "no bridge answered or it refused the connection".to_string(),
                (code, r) if r.is_empty() => format!("closed with code {code}"),
                (code, r) => format!("closed {code}: {r}"),
            };
            // Tear down outside this callback: the closure running now is owned by the connection.
            set_timeout(move || self.closed(reason), Duration::ZERO);
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        self.conn.set_value(Some(Connection { ws, _on_open: on_open, _on_message: on_message, _on_close: on_close }));
    }

    fn on_frame(&self, text: &str) {
        let message = match ServerMessage::from_json(text) {
            Ok(m) => m,
            Err(e) => return leptos::logging::warn!("bridge sent a frame we cannot read: {e}"),
        };
        let id = match &message {
            ServerMessage::Hello(hello) => {
                if hello.protocol != PROTOCOL_VERSION {
                    leptos::logging::warn!("bridge speaks protocol {}, page {PROTOCOL_VERSION}", hello.protocol);
                }
                self.attempts.set_value(0);
                self.ever_connected.set_value(true);
                self.status.set(BridgeStatus::Connected(hello.clone()));
                self.ping();
                return;
            }
            ServerMessage::Event { id, .. } | ServerMessage::Result { id, .. } => Some(*id),
            ServerMessage::Error(e) => e.id,
        };
        let Some(id) = id else {
            return leptos::logging::warn!("bridge error: {text}");
        };
        // Take the handler out while it runs, so it may itself send requests.
        let Some(mut handler) = self.pending.try_update_value(|p| p.remove(&id)).flatten() else { return };
        if !handler(&message) {
            self.pending.update_value(|p| {
                p.insert(id, handler);
            });
        }
    }

    fn closed(self, reason: String) {
        if let Some(old) = self.conn.try_update_value(Option::take).flatten() {
            old.ws.set_onclose(None);
            let _ = old.ws.close();
        }
        // Requests of the lost connection will never be answered.
        let lost = ServerMessage::error(None, kernels_wasm::protocol::ErrorCode::Io, "bridge connection lost");
        let handlers: Vec<Handler> =
            self.pending.try_update_value(|p| p.drain().map(|(_, h)| h).collect()).unwrap_or_default();
        for mut h in handlers {
            h(&lost);
        }
        self.rtt_ms.set(None);
        let attempt = self.attempts.get_value() + 1;
        self.attempts.set_value(attempt);
        let retry_in_ms = (250u32 << attempt.min(5)).min(MAX_BACKOFF_MS);
        self.status.set(if self.ever_connected.get_value() {
            BridgeStatus::Reconnecting { attempt, retry_in_ms }
        } else {
            BridgeStatus::Absent { attempt, retry_in_ms, reason }
        });
        set_timeout(move || self.connect(), Duration::from_millis(retry_in_ms.into()));
    }
}

/// The token from `?token=` (then removed from the address bar) or from this tab's session.
fn take_token() -> Option<String> {
    let window = window();
    let storage = window.session_storage().ok().flatten();
    let location = window.location();
    let search = location.search().unwrap_or_default();
    if let Some(t) = token::from_query(&search) {
        if let Some(s) = &storage {
            let _ = s.set_item(TOKEN_KEY, &t);
        }
        let clean = format!(
            "{}{}{}",
            location.pathname().unwrap_or_default(),
            token::strip(&search),
            location.hash().unwrap_or_default()
        );
        if let Ok(history) = window.history() {
            let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&clean));
        }
        return Some(t);
    }
    storage.and_then(|s| s.get_item(TOKEN_KEY).ok().flatten())
}

fn now_ms() -> f64 {
    window().performance().map(|p| p.now()).unwrap_or(0.0)
}
