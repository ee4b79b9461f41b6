//! A real `native-host serve` process on loopback and a websocket client for it, shared by the
//! bridge's test files.
#![allow(dead_code)]

use futures_util::{SinkExt, StreamExt};
use kernels_wasm::protocol::{
    ClientMessage, ErrorCode, Reply, Request, ServerMessage, MAX_IN_FLIGHT, PROTOCOL_VERSION,
};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const TOKEN: &str = "test-token-0123456789abcdef";
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub struct Server {
    pub child: Child,
    pub addr: String,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn start(name: &str) -> Server {
    start_with(name, &[])
}

/// `native-host serve` with `extra` arguments.
pub fn start_with(name: &str, extra: &[&str]) -> Server {
    let dir = std::env::temp_dir().join(format!("substrates-bridge-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(dir.join("models/tiny.gguf"), b"GGUF\x03\0\0\0\0\0\0\0\0\0\0\0").unwrap();
    std::fs::write(dir.join("outside.txt"), b"secret").unwrap();
    let mut falcon = kernels_wasm::gguf::GgufWriter::default();
    falcon.meta("general.architecture", kernels_wasm::gguf::Value::String("falcon".into()));
    std::fs::write(dir.join("models/falcon.gguf"), falcon.to_bytes()).unwrap();
    // The real model, where the test run has it (hard-linked: the bridge reads only its roots).
    if let Some(real) = std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
        let to = dir.join("models/smollm2.gguf");
        if std::fs::hard_link(&real, &to).is_err() {
            std::fs::copy(&real, &to).unwrap();
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .arg("--models-dir")
        .arg(dir.join("models"))
        .arg("--assets-dir")
        .arg(dir.join("assets"))
        .args(extra)
        .env("NATIVE_HOST_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        // Kept for the tests that look for panics; read it before the server is dropped.
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .expect("spawn native-host");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    let mut lines = stdout.lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.strip_prefix("listening on ws://") {
            addr = Some(url.trim_end_matches("/ws").to_string());
            break;
        }
    }
    // Keep draining its output so the server never writes into a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, addr: addr.expect("native-host printed no listening line"), dir }
}

pub async fn connect_raw(server: &Server, query: &str, origin: Option<&str>) -> Result<Ws, tungstenite::Error> {
    let mut req = format!("ws://{}/ws{query}", server.addr).into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req).await.map(|(ws, _)| ws)
}

/// Connects with the token and the playground's origin, checks the hello, sends ours.
pub async fn connect(server: &Server) -> Ws {
    let mut ws = connect_raw(server, &format!("?token={TOKEN}"), Some("http://127.0.0.1:8080")).await.unwrap();
    match recv(&mut ws).await {
        ServerMessage::Hello(h) => {
            assert_eq!(h.protocol, PROTOCOL_VERSION);
            assert_eq!(h.host_version, env!("CARGO_PKG_VERSION"));
            assert_eq!(h.limits.max_in_flight as usize, MAX_IN_FLIGHT);
        }
        other => panic!("expected hello, got {other:?}"),
    }
    send(&mut ws, &ClientMessage::Hello { protocol: PROTOCOL_VERSION, client: "test".into() }).await;
    ws
}

pub async fn send(ws: &mut Ws, m: &ClientMessage) {
    ws.send(Message::text(m.to_json())).await.unwrap();
}

pub async fn request(ws: &mut Ws, id: u64, request: Request) {
    send(ws, &ClientMessage::Request { id, request }).await;
}

/// The next protocol frame, or a panic naming what came instead.
pub async fn recv(ws: &mut Ws) -> ServerMessage {
    match next_frame(ws).await {
        Frame::Msg(m) => m,
        Frame::Closed(c) => panic!("connection closed: {c:?}"),
    }
}

#[derive(Debug)]
pub enum Frame {
    Msg(ServerMessage),
    Closed(Option<(u16, String)>),
}

pub async fn next_frame(ws: &mut Ws) -> Frame {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(20), ws.next()).await.expect("no frame within 20 s");
        match next {
            Some(Ok(Message::Text(t))) => return Frame::Msg(ServerMessage::from_json(t.as_str()).unwrap()),
            Some(Ok(Message::Close(c))) => return Frame::Closed(c.map(|c| (u16::from(c.code), c.reason.to_string()))),
            Some(Ok(_)) => continue,
            None | Some(Err(_)) => return Frame::Closed(None),
        }
    }
}

pub fn error_of(m: ServerMessage) -> (Option<u64>, ErrorCode, String) {
    match m {
        ServerMessage::Error(e) => (e.id, e.code, e.message),
        other => panic!("expected an error frame, got {other:?}"),
    }
}

pub async fn assert_alive(ws: &mut Ws, id: u64) {
    request(ws, id, Request::Ping { nonce: id * 7, delay_ms: 0 }).await;
    assert_eq!(recv(ws).await, ServerMessage::Result { id, result: Reply::Pong { nonce: id * 7 } });
}

/// A random secret in a world-readable file outside every directory a sandboxed child may read
/// (world-readable, so only the sandbox, not the file's mode, keeps it unread).
pub struct Canary {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub secret: String,
}

pub fn canary() -> Canary {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("canary-").tempdir_in(std::env::temp_dir()).unwrap();
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).unwrap();
    // A C identifier, so an include of it parses far enough for clang to quote it back.
    let secret = format!("canary_{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    let path = dir.path().join("secret.h");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Canary { _dir: dir, path, secret }
}
