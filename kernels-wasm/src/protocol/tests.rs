//! Round trips of every message type, and the decode errors for bad frames.
//! Runs natively and, through wasm-bindgen-test, in headless Chromium.

use super::*;
use alloc::string::ToString;
use alloc::vec;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

fn probe(ok: bool) -> ProbeResult {
    ProbeResult { available: ok, detail: if ok { "ok" } else { "bpf(): EPERM" }.to_string() }
}

fn every_client_message() -> Vec<ClientMessage> {
    let requests = vec![
        Request::Ping { nonce: u64::MAX, delay_ms: 3 },
        Request::Probe,
        Request::ListModels,
        Request::ModelInfo { root: FileRoot::Models, path: "a/b.gguf".into() },
        Request::ModelInfo { root: FileRoot::Assets, path: "ünïcode \"quoted\"".into() },
    ];
    let mut all = vec![
        ClientMessage::Hello { protocol: PROTOCOL_VERSION, client: "test".into() },
        ClientMessage::Cancel { id: 7 },
    ];
    all.extend(requests.into_iter().enumerate().map(|(i, request)| ClientMessage::Request { id: i as u64, request }));
    all
}

fn every_server_message() -> Vec<ServerMessage> {
    let caps = Capabilities { ebpf: probe(true), clang: probe(false) };
    let replies = vec![
        Reply::Pong { nonce: 0 },
        Reply::Capabilities(caps.clone()),
        Reply::Models { models: vec![ModelEntry { root: FileRoot::Assets, path: "x".into(), bytes: 1 << 40 }] },
        Reply::Models { models: vec![] },
        Reply::ModelInfo(ModelInfo {
            root: FileRoot::Models,
            path: "m.gguf".into(),
            bytes: 9,
            format: FileFormat::Gguf { version: 3 },
        }),
    ];
    let events = vec![
        Event::Progress { step: "load".into(), done: 1, total: 2 },
        Event::Probe { name: "ebpf".into(), result: probe(true) },
        Event::Log { line: "line\nwith newline".into() },
    ];
    let mut all = vec![
        ServerMessage::Hello(HostHello {
            protocol: PROTOCOL_VERSION,
            host_version: "0.1.0".into(),
            capabilities: caps,
            limits: Limits::default(),
        }),
        ServerMessage::error(None, ErrorCode::BadJson, "nope"),
    ];
    all.extend(replies.into_iter().map(|result| ServerMessage::Result { id: 3, result }));
    all.extend(events.into_iter().map(|event| ServerMessage::Event { id: 4, event }));
    all.extend(
        [
            ErrorCode::BadJson,
            ErrorCode::BadFrame,
            ErrorCode::UnknownType,
            ErrorCode::BadFields,
            ErrorCode::ProtocolVersion,
            ErrorCode::HelloRequired,
            ErrorCode::FrameTooLarge,
            ErrorCode::Busy,
            ErrorCode::DuplicateId,
            ErrorCode::BadRequest,
            ErrorCode::PathRefused,
            ErrorCode::NotFound,
            ErrorCode::Io,
            ErrorCode::Cancelled,
            ErrorCode::Internal,
        ]
        .into_iter()
        .map(|code| ServerMessage::error(Some(5), code, "m")),
    );
    all
}

#[test]
fn client_messages_round_trip() {
    for message in every_client_message() {
        let json = message.to_json();
        assert_eq!(ClientMessage::from_json(&json), Ok(message), "{json}");
    }
}

#[test]
fn server_messages_round_trip() {
    for message in every_server_message() {
        let json = message.to_json();
        assert_eq!(ServerMessage::from_json(&json), Ok(message), "{json}");
    }
}

#[test]
fn wire_format_is_the_documented_json() {
    // The page and any third-party client rely on these exact shapes.
    let ping = ClientMessage::Request { id: 1, request: Request::Ping { nonce: 2, delay_ms: 0 } };
    assert_eq!(ping.to_json(), r#"{"type":"request","id":1,"request":{"op":"ping","nonce":2,"delay_ms":0}}"#);
    let err = ServerMessage::error(None, ErrorCode::UnknownType, "x");
    assert_eq!(err.to_json(), r#"{"type":"error","id":null,"code":"unknown_type","message":"x"}"#);
    // delay_ms may be omitted.
    assert_eq!(
        ClientMessage::from_json(r#"{"type":"request","id":9,"request":{"op":"ping","nonce":1}}"#),
        Ok(ClientMessage::Request { id: 9, request: Request::Ping { nonce: 1, delay_ms: 0 } })
    );
}

#[test]
fn bad_frames_are_named() {
    let cases: &[(&str, ErrorCode, &str)] = &[
        ("{not json", ErrorCode::BadJson, "not valid JSON"),
        ("[1,2]", ErrorCode::UnknownType, "\"type\""),
        (r#"{"type":7}"#, ErrorCode::UnknownType, "\"type\""),
        (r#"{"type":"launch_missiles"}"#, ErrorCode::UnknownType, "launch_missiles"),
        (r#"{"type":"request","id":1,"request":{"op":"format_disk"}}"#, ErrorCode::UnknownType, "format_disk"),
        (r#"{"type":"request","id":-1,"request":{"op":"probe"}}"#, ErrorCode::BadFields, "request"),
        (r#"{"type":"hello"}"#, ErrorCode::BadFields, "protocol"),
        (
            r#"{"type":"request","id":1,"request":{"op":"model_info","root":"etc","path":"x"}}"#,
            ErrorCode::BadFields,
            "etc",
        ),
    ];
    for (frame, code, mentions) in cases {
        let err = ClientMessage::from_json(frame).expect_err(frame);
        assert_eq!(err.code(), *code, "{frame}: {err}");
        assert!(err.to_string().contains(mentions), "{frame}: {err}");
    }
    let huge = alloc::format!("\"{}\"", "a".repeat(MAX_FRAME_BYTES));
    assert_eq!(ClientMessage::from_json(&huge).map_err(|e| e.code()), Err(ErrorCode::FrameTooLarge));
}

#[test]
fn file_formats_are_sniffed() {
    assert_eq!(FileFormat::sniff(b"GGUF\x03\0\0\0rest"), FileFormat::Gguf { version: 3 });
    let mut st = 12u64.to_le_bytes().to_vec();
    st.extend_from_slice(b"{\"a\":1}     ");
    assert_eq!(FileFormat::sniff(&st), FileFormat::Safetensors);
    assert_eq!(FileFormat::sniff(b"GGU"), FileFormat::Unknown);
    assert_eq!(FileFormat::sniff(&[0xff; 16]), FileFormat::Unknown);
}
