//! One websocket connection: hello, then a reader loop that decodes frames and starts request
//! tasks, and a writer task that owns the socket's sending half.
//!
//! Bounds, so a flood cannot grow memory or starve other connections:
//! - frames over [`MAX_FRAME_BYTES`] are refused by the websocket layer → error + close 1009;
//! - at most [`MAX_IN_FLIGHT`] requests run; more are answered `busy` at once;
//! - the writer's queue holds [`OUTBOUND_QUEUE`] frames; if the client stops reading and it fills,
//!   the connection is closed with 1008 rather than buffering without end.

use super::handshake;
use super::requests;
use super::{Config, HANDSHAKE_TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use kernels_wasm::protocol::{
    close_code, ClientMessage, ErrorCode, HostHello, Limits, RequestId, ServerMessage, MAX_FRAME_BYTES, MAX_IN_FLIGHT,
    PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};

pub const OUTBOUND_QUEUE: usize = 256;

/// What the writer task is asked to do.
pub enum Outbound {
    Frame(ServerMessage),
    Close(u16, String),
}

pub async fn run(mut stream: TcpStream, peer: SocketAddr, config: Arc<Config>, slot: Option<OwnedSemaphorePermit>) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, is_websocket_upgrade(&stream)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return not_a_websocket(&mut stream).await,
        Ok(Err(_)) => return,
        Err(_) => return crate::warn!("{peer}: no complete HTTP request within {HANDSHAKE_TIMEOUT:?}"),
    }
    let ws_config =
        WebSocketConfig::default().max_message_size(Some(MAX_FRAME_BYTES)).max_frame_size(Some(MAX_FRAME_BYTES));
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(
        stream,
        handshake::callback(&config, slot.is_some()),
        Some(ws_config),
    );
    let ws = match tokio::time::timeout(HANDSHAKE_TIMEOUT, upgrade).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return crate::warn!("{peer}: upgrade failed: {e}"),
        Err(_) => return crate::warn!("{peer}: upgrade timed out"),
    };
    let (sink, mut source) = ws.split();
    let (out, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
    let (urgent_close, urgent_rx) = mpsc::channel(1);
    let writer = tokio::spawn(write_loop(sink, out_rx, urgent_rx));
    let hello = ServerMessage::Hello(HostHello {
        protocol: PROTOCOL_VERSION,
        host_version: config.host_version.clone(),
        capabilities: config.capabilities.clone(),
        limits: Limits::default(),
    });
    let _ = out.send(Outbound::Frame(hello)).await;

    let mut conn = Conn { out, urgent_close: Some(urgent_close), config, hello_done: false, running: HashMap::new() };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<RequestId>();
    let hello_deadline = tokio::time::sleep(HANDSHAKE_TIMEOUT);
    tokio::pin!(hello_deadline);
    loop {
        let next = tokio::select! {
            biased;
            Some(id) = done_rx.recv() => { conn.running.remove(&id); continue; }
            () = &mut hello_deadline, if !conn.hello_done => {
                conn.close(close_code::POLICY_VIOLATION, "no hello within 10 s");
                break;
            }
            next = source.next() => next,
        };
        let step = match next {
            None => Step::Stop,
            Some(Ok(Message::Text(text))) => conn.on_text(text.as_str(), &done_tx),
            Some(Ok(Message::Binary(_))) => conn.reply_now(ServerMessage::error(
                None,
                ErrorCode::BadFrame,
                "binary frames are not part of the protocol; send JSON text frames",
            )),
            Some(Ok(Message::Close(_))) => Step::Stop,
            Some(Ok(_)) => Step::Go, // ping/pong are answered by tungstenite
            Some(Err(tungstenite::Error::Capacity(e))) => {
                let why = format!("frame refused: {e} (limit {MAX_FRAME_BYTES} bytes)");
                conn.reply_now(ServerMessage::error(None, ErrorCode::FrameTooLarge, why.clone()));
                conn.close(close_code::MESSAGE_TOO_BIG, &why);
                Step::Stop
            }
            Some(Err(tungstenite::Error::Protocol(e))) => {
                conn.close(close_code::PROTOCOL_ERROR, &format!("websocket protocol error: {e}"));
                Step::Stop
            }
            Some(Err(_)) => Step::Stop, // the socket is gone
        };
        if let Step::Stop = step {
            break;
        }
    }
    // Dropping the cancel senders stops every request still running for this connection.
    conn.running.clear();
    drop(conn);
    if let Ok(sink) = writer.await {
        if let Ok(mut ws) = source.reunite(sink) {
            linger(ws.get_mut()).await;
        }
    }
}

/// How long a closing connection keeps reading what the client still sends.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// A lingering close. When we close first (an oversized frame above all, whose payload we never
/// read), the client may still be sending. Closing a TCP socket with unread bytes makes the kernel
/// answer with a reset, which makes the client's send fail and throws away our error and close
/// frames before it reads them. So: send FIN, then read and discard until the client's FIN, for at
/// most [`LINGER`].
async fn linger(stream: &mut TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 16 * 1024];
    let drain = async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Reads (without consuming) the request head: is it a websocket upgrade? Anything else, e.g. a
/// person opening the bridge's address in a browser, gets a plain explanation instead.
async fn is_websocket_upgrade(stream: &TcpStream) -> std::io::Result<bool> {
    const MAX_HEAD: usize = 16 * 1024;
    let mut buf = vec![0u8; MAX_HEAD];
    loop {
        let n = stream.peek(&mut buf).await?;
        let head = &buf[..n];
        if n == 0 || n == MAX_HEAD {
            return Ok(false);
        }
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
            return Ok(head.lines().any(|l| l.starts_with("upgrade:") && l.contains("websocket")));
        }
        // peek returns at once while the head is incomplete; wait for more bytes.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn not_a_websocket(stream: &mut TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "This is the substrates bridge (native-host serve). It speaks websocket at /ws?token=<session token>.\n\
                Open the playground instead: the URL `cargo xtask serve` printed.\n";
    let response = format!(
        "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: close\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

enum Step {
    Go,
    Stop,
}

struct Conn {
    out: mpsc::Sender<Outbound>,
    /// Bypasses the queue when the queue itself is the problem.
    urgent_close: Option<mpsc::Sender<(u16, String)>>,
    config: Arc<Config>,
    hello_done: bool,
    running: HashMap<RequestId, oneshot::Sender<()>>,
}

impl Conn {
    fn on_text(&mut self, text: &str, done: &mpsc::UnboundedSender<RequestId>) -> Step {
        let message = match ClientMessage::from_json(text) {
            Ok(m) => m,
            Err(e) => return self.reply_now(ServerMessage::error(None, e.code(), e.to_string())),
        };
        match message {
            ClientMessage::Hello { protocol, .. } if protocol != PROTOCOL_VERSION => {
                let why = format!("client speaks protocol {protocol}; this host speaks {PROTOCOL_VERSION}");
                self.reply_now(ServerMessage::error(None, ErrorCode::ProtocolVersion, why.clone()));
                self.close(close_code::PROTOCOL_ERROR, &why);
                Step::Stop
            }
            ClientMessage::Hello { .. } if self.hello_done => {
                self.reply_now(ServerMessage::error(None, ErrorCode::BadRequest, "hello was already received"))
            }
            ClientMessage::Hello { .. } => {
                self.hello_done = true;
                Step::Go
            }
            ClientMessage::Request { id, .. } | ClientMessage::Cancel { id } if !self.hello_done => {
                self.reply_now(ServerMessage::error(
                    Some(id),
                    ErrorCode::HelloRequired,
                    "send {\"type\":\"hello\",\"protocol\":1} first",
                ))
            }
            ClientMessage::Cancel { id } => match self.running.remove(&id) {
                // The request's own task sends its final `cancelled` error, so its events and
                // its final frame stay in order.
                Some(cancel) => {
                    let _ = cancel.send(());
                    Step::Go
                }
                None => self.reply_now(ServerMessage::error(
                    Some(id),
                    ErrorCode::NotFound,
                    format!("no request {id} is running"),
                )),
            },
            ClientMessage::Request { id, .. } if self.running.contains_key(&id) => {
                self.reply_now(ServerMessage::error(
                    Some(id),
                    ErrorCode::DuplicateId,
                    format!("request {id} is still running; ids must be unique among running requests"),
                ))
            }
            ClientMessage::Request { id, .. } if self.running.len() >= MAX_IN_FLIGHT => {
                self.reply_now(ServerMessage::error(
                    Some(id),
                    ErrorCode::Busy,
                    format!("{MAX_IN_FLIGHT} requests are already running; wait for one to finish"),
                ))
            }
            ClientMessage::Request { id, request } => {
                let (cancel_tx, cancel_rx) = oneshot::channel();
                self.running.insert(id, cancel_tx);
                let task = requests::Task { id, out: self.out.clone(), config: Arc::clone(&self.config) };
                tokio::spawn(task.run(request, cancel_rx, done.clone()));
                Step::Go
            }
        }
    }

    /// Queues a frame without waiting. A full queue means the client is not reading: close.
    fn reply_now(&mut self, message: ServerMessage) -> Step {
        match self.out.try_send(Outbound::Frame(message)) {
            Ok(()) => Step::Go,
            Err(_) => {
                let why = "outbound queue full: the client is not reading its replies";
                if let Some(urgent) = self.urgent_close.take() {
                    let _ = urgent.try_send((close_code::POLICY_VIOLATION, why.to_string()));
                }
                Step::Stop
            }
        }
    }

    /// Closes after the frames already queued, so an error explaining the close arrives first.
    fn close(&mut self, code: u16, reason: &str) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.out.try_send(Outbound::Close(code, reason.to_string())) {
            if let Some(urgent) = self.urgent_close.take() {
                let _ = urgent.try_send((code, reason.to_string()));
            }
        }
    }
}

/// Returns the sink so the connection can linger on the socket after the close.
async fn write_loop<S>(mut sink: S, mut rx: mpsc::Receiver<Outbound>, mut urgent: mpsc::Receiver<(u16, String)>) -> S
where
    S: futures_util::Sink<Message, Error = tungstenite::Error> + Unpin,
{
    loop {
        // An urgent close drops whatever is still queued. Abandoning a `send` that is waiting
        // for socket space is safe: tungstenite keeps a started frame in its buffer and flushes
        // it before the close frame.
        let item = tokio::select! {
            biased;
            Some(close) = urgent.recv() => Outbound::Close(close.0, close.1),
            item = rx.recv() => match item { Some(item) => item, None => break },
        };
        match item {
            Outbound::Frame(message) => {
                let sent = tokio::select! {
                    biased;
                    Some((code, reason)) = urgent.recv() => { send_close(&mut sink, code, &reason).await; break; }
                    r = sink.send(Message::text(message.to_json())) => r,
                };
                if sent.is_err() {
                    break;
                }
            }
            Outbound::Close(code, reason) => {
                send_close(&mut sink, code, &reason).await;
                break;
            }
        }
    }
    let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, sink.close()).await;
    sink
}

async fn send_close<S>(sink: &mut S, code: u16, reason: &str)
where
    S: futures_util::Sink<Message, Error = tungstenite::Error> + Unpin,
{
    // Close reasons are limited to 123 bytes by RFC 6455.
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let frame = CloseFrame { code: CloseCode::from(code), reason: reason[..cut].to_string().into() };
    let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, sink.send(Message::Close(Some(frame)))).await;
}
