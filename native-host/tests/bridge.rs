//! Bad-input and protocol tests against a real `native-host serve` process on loopback.

mod common;

use common::*;
use futures_util::SinkExt;
use kernels_wasm::protocol::{
    close_code, ClientMessage, ErrorCode, Event, FileFormat, FileRoot, Reply, Request, ServerMessage, MAX_FRAME_BYTES,
    MAX_IN_FLIGHT, PROTOCOL_VERSION,
};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

#[tokio::test]
async fn requests_stream_events_then_one_result() {
    let server = start("requests");
    let mut ws = connect(&server).await;
    assert_alive(&mut ws, 1).await;

    request(&mut ws, 2, Request::Probe).await;
    let mut probes = vec![];
    let caps = loop {
        match recv(&mut ws).await {
            ServerMessage::Event { id: 2, event: Event::Probe { name, .. } } => probes.push(name),
            ServerMessage::Result { id: 2, result: Reply::Capabilities(c) } => break c,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(probes, ["ebpf", "clang"]);
    assert!(!caps.ebpf.detail.is_empty());

    request(&mut ws, 3, Request::ListModels).await;
    match recv(&mut ws).await {
        ServerMessage::Result { id: 3, result: Reply::Models { models } } => {
            let names: Vec<_> = models.iter().map(|m| (m.root, m.path.as_str(), m.bytes)).collect();
            // The models directory's files (falcon.gguf, and smollm2.gguf where the run has it);
            // outside.txt, beside the root, is not listed.
            assert!(names.contains(&(FileRoot::Models, "tiny.gguf", 16)), "{names:?}");
            assert!(names.iter().all(|n| n.0 == FileRoot::Models && n.1.ends_with(".gguf")), "{names:?}");
        }
        other => panic!("{other:?}"),
    }

    request(&mut ws, 4, Request::ModelInfo { root: FileRoot::Models, path: "tiny.gguf".into() }).await;
    match recv(&mut ws).await {
        ServerMessage::Result { id: 4, result: Reply::ModelInfo(info) } => {
            assert_eq!((info.bytes, info.format), (16, FileFormat::Gguf { version: 3 }))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn paths_outside_the_roots_are_refused() {
    let server = start("paths");
    let mut ws = connect(&server).await;
    let outside = server.dir.join("outside.txt").display().to_string();
    for (i, path) in ["../outside.txt", outside.as_str(), "a/../../outside.txt"].into_iter().enumerate() {
        let id = 10 + i as u64;
        request(&mut ws, id, Request::ModelInfo { root: FileRoot::Models, path: path.into() }).await;
        let (got_id, code, message) = error_of(recv(&mut ws).await);
        assert_eq!((got_id, code), (Some(id), ErrorCode::PathRefused), "{path}: {message}");
    }
    request(&mut ws, 20, Request::ModelInfo { root: FileRoot::Assets, path: "nope.bin".into() }).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::NotFound);
    assert_alive(&mut ws, 21).await;
}

/// CUDA from the page compiles with the host's clang-19 to exactly the committed PTX; sources
/// that would make clang read another file, oversized ones and broken ones get named errors.
#[tokio::test]
async fn cuda_compiles_on_the_host_and_other_files_stay_unread() {
    let server = start("cuda");
    let mut ws = connect(&server).await;
    let k = kernels_wasm::qwengpu::suite::kernels().into_iter().find(|k| k.name == "bitonic_step").unwrap();
    request(&mut ws, 1, Request::QwengpuCompile { cuda: k.cuda.into() }).await;
    match recv(&mut ws).await {
        ServerMessage::Result { id: 1, result: Reply::QwengpuPtx { ptx } } => {
            assert!(ptx == k.ptx, "not the committed PTX")
        }
        other => panic!("{other:?}"),
    }
    let secret = server.dir.join("outside.txt").display().to_string();
    let hostile = [
        format!("#include \"{secret}\"\n"),
        format!("  #  include <{secret}>\n"),
        format!("%:include \"{secret}\"\n"),
        format!("#inc\\\nlude \"{secret}\"\n"),
        "#include_next \"qwengpu.h\"\n".to_string(),
        format!("#if __has_include(\"{secret}\")\n#endif\n"),
        "#embed \"/etc/passwd\"\n".to_string(),
    ];
    for (i, src) in hostile.iter().enumerate() {
        let id = 10 + i as u64;
        request(&mut ws, id, Request::QwengpuCompile { cuda: src.clone() }).await;
        let (got, code, message) = error_of(recv(&mut ws).await);
        assert_eq!((got, code), (Some(id), ErrorCode::PathRefused), "{src}: {message}");
        assert!(message.contains("only `#include \"qwengpu.h\"`"), "{message}");
    }
    request(&mut ws, 20, Request::QwengpuCompile { cuda: "x".repeat(kernels_wasm::protocol::MAX_CUDA_BYTES + 1) })
        .await;
    let (_, code, message) = error_of(recv(&mut ws).await);
    assert_eq!(code, ErrorCode::BadRequest, "{message}");
    assert!(message.contains("limit"), "{message}");
    request(&mut ws, 21, Request::QwengpuCompile { cuda: "__global__ void f(int *x) { x[0] = ; }\n".into() }).await;
    let (_, code, message) = error_of(recv(&mut ws).await);
    assert_eq!(code, ErrorCode::BadRequest, "{message}");
    assert!(message.contains("error:") && !message.contains("substrates-cuda-"), "{message}");
    assert_alive(&mut ws, 22).await;
}

#[tokio::test]
async fn upgrades_without_token_or_from_other_origins_are_refused() {
    let server = start("auth");
    let status = |r: Result<Ws, tungstenite::Error>| match r {
        Err(tungstenite::Error::Http(resp)) => {
            let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            (resp.status().as_u16(), body)
        }
        Err(e) => panic!("expected an HTTP refusal, got {e}"),
        Ok(_) => panic!("upgrade was accepted"),
    };
    let good = format!("?token={TOKEN}");
    let (code, body) = status(connect_raw(&server, "", Some("http://127.0.0.1:8080")).await);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("token"), "{body}");
    assert_eq!(status(connect_raw(&server, "?token=wrong-token-0123456789", None).await).0, 401);
    let (code, body) = status(connect_raw(&server, &good, Some("http://evil.example")).await);
    assert_eq!(code, 403);
    assert!(body.contains("evil.example"), "{body}");
    assert_eq!(status(connect_raw(&server, &good, Some("http://127.0.0.1:9999")).await).0, 403);
    // With the token and an allowed (or no) origin it works.
    assert!(connect_raw(&server, &good, Some("http://localhost:8080")).await.is_ok());
    assert!(connect_raw(&server, &good, None).await.is_ok());
}

#[tokio::test]
async fn malformed_and_unknown_frames_get_errors_and_the_connection_lives() {
    let server = start("malformed");
    let mut ws = connect(&server).await;
    let cases: &[(&str, ErrorCode)] = &[
        ("{this is not json", ErrorCode::BadJson),
        ("", ErrorCode::BadJson),
        ("42", ErrorCode::UnknownType),
        (r#"{"type":"exterminate"}"#, ErrorCode::UnknownType),
        (r#"{"type":"request","id":1,"request":{"op":"rm_rf"}}"#, ErrorCode::UnknownType),
        (r#"{"type":"request","id":"x","request":{"op":"probe"}}"#, ErrorCode::BadFields),
        (r#"{"type":"request","id":1,"request":{"op":"ping","nonce":1,"delay_ms":999999}}"#, ErrorCode::BadRequest),
    ];
    for (frame, code) in cases {
        ws.send(Message::text(*frame)).await.unwrap();
        let (_, got, message) = error_of(recv(&mut ws).await);
        assert_eq!(got, *code, "{frame}: {message}");
    }
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::BadFrame);
    assert_alive(&mut ws, 99).await;
}

#[tokio::test]
async fn handshake_order_and_protocol_version_are_enforced() {
    let server = start("version");
    let mut ws = connect_raw(&server, &format!("?token={TOKEN}"), None).await.unwrap();
    assert!(matches!(recv(&mut ws).await, ServerMessage::Hello(_)));
    request(&mut ws, 1, Request::Probe).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::HelloRequired);
    send(&mut ws, &ClientMessage::Hello { protocol: PROTOCOL_VERSION + 1, client: "future".into() }).await;
    let (_, code, message) = error_of(recv(&mut ws).await);
    assert_eq!(code, ErrorCode::ProtocolVersion);
    assert!(message.contains(&format!("{}", PROTOCOL_VERSION + 1)), "{message}");
    match next_frame(&mut ws).await {
        Frame::Closed(Some((code, reason))) => {
            assert_eq!(code, close_code::PROTOCOL_ERROR);
            assert!(reason.contains("protocol"), "{reason}");
        }
        other => panic!("expected a close with a reason, got {other:?}"),
    }
}

#[tokio::test]
async fn oversized_frames_close_with_1009_and_the_server_lives() {
    let server = start("oversized");
    let mut ws = connect(&server).await;
    // Several limits' worth, so the client is still writing when the server refuses the header:
    // the server must read and drop the rest rather than reset the connection under it.
    let big = format!(
        r#"{{"type":"request","id":1,"request":{{"op":"ping","nonce":1,"pad":"{}"}}}}"#,
        "x".repeat(8 * MAX_FRAME_BYTES)
    );
    ws.send(Message::text(big)).await.expect("the server must let the client finish its frame");
    let (_, code, _) = error_of(recv(&mut ws).await);
    assert_eq!(code, ErrorCode::FrameTooLarge);
    match next_frame(&mut ws).await {
        Frame::Closed(Some((code, reason))) => {
            assert_eq!(code, u16::from(CloseCode::Size));
            assert!(reason.contains("limit"), "{reason}");
        }
        other => panic!("expected close 1009, got {other:?}"),
    }
    let mut again = connect(&server).await;
    assert_alive(&mut again, 2).await;
}

#[tokio::test]
async fn in_flight_requests_are_bounded() {
    let server = start("inflight");
    let mut ws = connect(&server).await;
    let total = MAX_IN_FLIGHT as u64 + 10;
    for id in 0..total {
        request(&mut ws, id, Request::Ping { nonce: id, delay_ms: 1500 }).await;
    }
    let (mut pongs, mut busy) = (vec![], vec![]);
    for _ in 0..total {
        match recv(&mut ws).await {
            ServerMessage::Result { id, result: Reply::Pong { nonce } } => {
                assert_eq!(id, nonce);
                pongs.push(id)
            }
            ServerMessage::Error(e) if e.code == ErrorCode::Busy => busy.push(e.id.unwrap()),
            other => panic!("{other:?}"),
        }
    }
    pongs.sort();
    busy.sort();
    assert_eq!(pongs, (0..MAX_IN_FLIGHT as u64).collect::<Vec<_>>());
    assert_eq!(busy, (MAX_IN_FLIGHT as u64..total).collect::<Vec<_>>());
    // Slots free up again, and a finished id may be reused.
    assert_alive(&mut ws, 0).await;
}

#[tokio::test]
async fn duplicate_ids_and_cancellation() {
    let server = start("cancel");
    let mut ws = connect(&server).await;
    request(&mut ws, 5, Request::Ping { nonce: 1, delay_ms: 5000 }).await;
    request(&mut ws, 5, Request::Ping { nonce: 2, delay_ms: 0 }).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::DuplicateId);
    send(&mut ws, &ClientMessage::Cancel { id: 5 }).await;
    assert_eq!(error_of(recv(&mut ws).await), (Some(5), ErrorCode::Cancelled, "cancelled by the client".into()));
    send(&mut ws, &ClientMessage::Cancel { id: 5 }).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::NotFound);
    assert_alive(&mut ws, 5).await;
}

#[tokio::test]
async fn a_flood_from_a_client_that_does_not_read_is_bounded() {
    let server = start("flood");
    let mut ws = connect(&server).await;
    // Many more error replies than the outbound queue holds, sent without reading any.
    let n = 50_000;
    let mut sent = 0;
    for _ in 0..n {
        if ws.feed(Message::text("{bad")).await.is_err() {
            break;
        }
        sent += 1;
    }
    let _ = ws.flush().await;
    // Every frame was either answered, or the server closed the connection with a reason.
    let mut answered = 0;
    let end = loop {
        match next_frame(&mut ws).await {
            Frame::Msg(m) => {
                assert_eq!(error_of(m).1, ErrorCode::BadJson);
                answered += 1;
                if answered == sent {
                    break None;
                }
            }
            Frame::Closed(c) => break Some(c),
        }
    };
    eprintln!("flood: sent {sent}, answered {answered}, close {end:?}");
    if let Some(close) = end {
        let (code, reason) = close.expect("closed without a reason");
        assert_eq!(code, close_code::POLICY_VIOLATION);
        assert!(reason.contains("not reading"), "{reason}");
    }
    // The server itself is unaffected.
    let mut other = connect(&server).await;
    assert_alive(&mut other, 1).await;
}

#[tokio::test]
async fn connections_are_bounded() {
    let server = start("connections");
    let mut open = vec![];
    for _ in 0..native_host::bridge::MAX_CONNECTIONS {
        open.push(connect(&server).await);
    }
    match connect_raw(&server, &format!("?token={TOKEN}"), None).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 503),
        other => panic!("expected 503, got {:?}", other.map(|_| ())),
    }
    drop(open);
    // Slots come back once those connections end.
    let mut tries = 0;
    let mut ws = loop {
        match connect_raw(&server, &format!("?token={TOKEN}"), None).await {
            Ok(ws) => break ws,
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(matches!(recv(&mut ws).await, ServerMessage::Hello(_)));
}

#[tokio::test]
async fn silent_clients_are_dropped_and_plain_http_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = start("silent");
    // Both waits run at once: each ends after the bridge's 10 s handshake timeout.
    let never_says_hello = async {
        // A websocket that never says hello is closed with a reason.
        let mut ws = connect_raw(&server, &format!("?token={TOKEN}"), None).await.unwrap();
        assert!(matches!(recv(&mut ws).await, ServerMessage::Hello(_)));
        match next_frame(&mut ws).await {
            Frame::Closed(Some((code, reason))) => {
                assert_eq!(code, close_code::POLICY_VIOLATION);
                assert!(reason.contains("hello"), "{reason}");
            }
            other => panic!("expected a close, got {other:?}"),
        }
    };
    let never_upgrades = async {
        // A TCP connection that never finishes its upgrade is dropped.
        let mut idle = TcpStream::connect(&server.addr).await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(20), idle.read(&mut buf)).await.expect("open after 20 s");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    };
    tokio::join!(never_says_hello, never_upgrades);
    // A plain HTTP request (someone opening the address in a browser) gets an explanation.
    let mut plain = TcpStream::connect(&server.addr).await.unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), plain.read_to_string(&mut reply)).await.unwrap().unwrap();
    assert!(reply.starts_with("HTTP/1.1 426 Upgrade Required"), "{reply}");
    assert!(reply.contains("substrates bridge") && !reply.contains(TOKEN), "{reply}");
    let mut again = connect(&server).await;
    assert_alive(&mut again, 1).await;
}

/// An eBPF run over the bridge: the verifier statistics, a token event and a trace per position
/// (one span per BPF call), tokens equal to the golden model's greedy ones; a second run while
/// the first holds the maps is `busy`; bad prompts and paths are refused by name.
#[tokio::test]
async fn ebpf_runs_stream_tokens_and_traces() {
    use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt};
    use kernels_wasm::qwen3::model::{Cache, Config, Model};
    let server = start("ebpf");
    let mut ws = connect(&server).await;
    let run = |ids: Vec<u32>, max_tokens: u32, model: EbpfModel| Request::EbpfRun {
        model,
        prompt: EbpfPrompt::Ids { ids },
        max_tokens,
        threads: 2,
    };
    let tiny = EbpfModel::TinyRandom { seed: 5 };
    let path = |p: &str| EbpfModel::Path { path: p.into() };

    // Bad input first: each names what was wrong. (Checked before the kernel is touched, so
    // these run on hosts without BPF too.)
    request(&mut ws, 1, run(vec![], 4, tiny.clone())).await;
    assert!(error_of(recv(&mut ws).await).2.contains("prompt"));
    request(&mut ws, 2, run(vec![1], 4, path("../outside.txt"))).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::PathRefused);
    if native_host::probe::ebpf().available {
        request(&mut ws, 3, run(vec![5000], 4, tiny.clone())).await;
        assert!(error_of(recv(&mut ws).await).2.contains("outside the vocabulary"));
        let cases: [(Request, &str); 6] = [
            (run(vec![1], 4, path("missing.gguf")), "missing.gguf"),
            // A GGUF header that ends where its tensor count should be.
            (run(vec![1], 4, path("tiny.gguf")), "truncated"),
            (run(vec![1], 4, path("falcon.gguf")), "architecture \"falcon\""),
            (run(vec![1; 2049], 4, tiny.clone()), "2048"),
            (
                Request::EbpfRun {
                    model: tiny.clone(),
                    prompt: EbpfPrompt::Text { text: "hello".into(), chat: false },
                    max_tokens: 2,
                    threads: 1,
                },
                "no tokenizer",
            ),
            (run(vec![1], 100_000, tiny.clone()), "max_tokens"),
        ];
        for (i, (req, needle)) in cases.into_iter().enumerate() {
            request(&mut ws, 30 + i as u64, req).await;
            let (_, code, message) = error_of(recv(&mut ws).await);
            assert!(message.contains(needle), "case {i}: {code:?} {message:?} lacks {needle:?}");
        }
    } else {
        eprintln!("SKIPPED the kernel half: {}", native_host::probe::ebpf().detail);
        return;
    }
    // Long enough (tens of ms) that the second request arrives while this one runs.
    let (prompt, n) = (vec![7u32, 300, 12], 60u32);
    request(&mut ws, 4, run(prompt.clone(), n, tiny.clone())).await;
    let (mut tokens, mut traces, mut verifier, mut busy, mut done) = (Vec::new(), 0, false, false, None);
    while done.is_none() || !busy {
        match recv(&mut ws).await {
            ServerMessage::Event { id: 4, event: Event::EbpfPrompt { ids, model, .. } } => {
                assert_eq!(ids, prompt);
                assert!(model.contains("tiny random Qwen3"), "{model}");
            }
            ServerMessage::Event { id: 4, event: Event::EbpfVerifier { programs } } => {
                verifier = programs.iter().any(|p| p.program == "qwen3_attention" && p.instructions > 0);
                // The first run now holds the maps: a second one must be refused.
                request(&mut ws, 5, run(vec![1], 1, tiny.clone())).await;
            }
            ServerMessage::Event {
                id: 4,
                event: Event::EbpfToken { prompt: in_prompt, token, calls, top, reference_top, .. },
            } => {
                assert_eq!(top[0].token, token);
                // The f32 reference beside it: the same largest logit, within the golden model's
                // error (see qwen3::reference).
                assert_eq!(reference_top.len(), 5);
                assert!((top[0].logit - reference_top[0].logit).abs() < 0.05, "{top:?} vs {reference_top:?}");
                assert!(calls > 0);
                if !in_prompt {
                    tokens.push(token);
                }
            }
            ServerMessage::Event { id: 4, event: Event::EbpfTrace { spans, .. } } => {
                assert!(spans.iter().any(|s| s.op == "attention" && s.layer == Some(0)));
                assert!(spans.windows(2).all(|w| w[0].end_ns <= w[1].start_ns + 1_000_000));
                traces += 1;
            }
            ServerMessage::Result { id: 4, result: Reply::EbpfDone { generated, calls_per_token, .. } } => {
                assert!(calls_per_token > 0.0);
                done = Some(generated);
            }
            ServerMessage::Error(e) if e.id == Some(5) => {
                assert_eq!(e.code, ErrorCode::Busy, "{}", e.message);
                busy = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(verifier);
    assert_eq!(traces, prompt.len() + n as usize - 1);
    // The golden model's greedy continuation of the same prompt.
    let model = Model::from_float(Config::TINY, &Model::random_float(Config::TINY, 5)).unwrap();
    let mut cache = Cache::default();
    let mut next = 0;
    for (pos, &t) in prompt.iter().enumerate() {
        next = model.forward(t as usize, pos, &mut cache).argmax;
    }
    let mut golden = vec![next as u32];
    for i in 1..n as usize {
        next = model.forward(next, prompt.len() + i - 1, &mut cache).argmax;
        golden.push(next as u32);
    }
    assert_eq!(done.unwrap(), golden);
    assert_eq!(tokens, golden);
    assert_alive(&mut ws, 9).await;
}

/// Cancelling a run ends it with `cancelled` and frees the kernel maps for the next run.
#[tokio::test]
async fn a_cancelled_ebpf_run_releases_the_kernel() {
    use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt};
    if !native_host::probe::ebpf().available {
        eprintln!("SKIPPED: {}", native_host::probe::ebpf().detail);
        return;
    }
    let server = start("ebpf-cancel");
    let mut ws = connect(&server).await;
    let run = |max_tokens| Request::EbpfRun {
        model: EbpfModel::TinyRandom { seed: 1 },
        prompt: EbpfPrompt::Ids { ids: vec![1] },
        max_tokens,
        threads: 1,
    };
    request(&mut ws, 1, run(512)).await;
    loop {
        match recv(&mut ws).await {
            ServerMessage::Event { id: 1, event: Event::EbpfToken { .. } } => break,
            ServerMessage::Event { id: 1, .. } => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
    send(&mut ws, &ClientMessage::Cancel { id: 1 }).await;
    loop {
        match recv(&mut ws).await {
            ServerMessage::Event { id: 1, .. } => continue,
            m => {
                assert_eq!(error_of(m).1, ErrorCode::Cancelled);
                break;
            }
        }
    }
    // The run's thread notices at its next token and drops its programs and maps; a new run
    // then gets the kernel (busy only in that short window).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut id = 10;
    loop {
        request(&mut ws, id, run(1)).await;
        let mut outcome = None;
        while outcome.is_none() {
            match recv(&mut ws).await {
                ServerMessage::Event { .. } => {}
                ServerMessage::Result { id: got, result: Reply::EbpfDone { generated, .. } } if got == id => {
                    outcome = Some(Ok(generated))
                }
                m => outcome = Some(Err(error_of(m).1)),
            }
        }
        match outcome {
            Some(Ok(generated)) => {
                assert_eq!(generated.len(), 1);
                break;
            }
            Some(Err(ErrorCode::Busy)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                id += 1;
            }
            other => panic!("the kernel was not released: {other:?}"),
        }
    }
}

/// A text prompt, tokenized by the bridge with the GGUF file's own tokenizer, on the real
/// SmolLM2: the prompt comes back as ids with their text, tokens stream with their text.
#[tokio::test]
async fn a_text_prompt_runs_on_the_real_model() {
    use kernels_wasm::protocol::ebpf::{EbpfModel, EbpfPrompt};
    if std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").is_none() || !native_host::probe::ebpf().available {
        eprintln!("SKIPPED: needs SUBSTRATES_SMOLLM2_GGUF (cargo xtask test) and a host that loads BPF");
        return;
    }
    let server = start("ebpf-text");
    let mut ws = connect(&server).await;
    let req = Request::EbpfRun {
        model: EbpfModel::Path { path: "smollm2.gguf".into() },
        prompt: EbpfPrompt::Text { text: "The capital of France is".into(), chat: false },
        max_tokens: 3,
        threads: 2,
    };
    request(&mut ws, 1, req).await;
    let (mut pieces, mut text) = (Vec::new(), String::new());
    loop {
        match recv(&mut ws).await {
            ServerMessage::Event { event: Event::EbpfPrompt { model, ids, pieces: p }, .. } => {
                assert!(model.starts_with("GGUF llama: 30 layers"), "{model}");
                assert_eq!((ids.len(), p.len()), (5, 5));
                pieces = p;
            }
            ServerMessage::Event { event: Event::EbpfToken { prompt: false, text: t, .. }, .. } => text.push_str(&t),
            ServerMessage::Event { .. } => {}
            ServerMessage::Result { result: Reply::EbpfDone { generated, .. }, .. } => {
                assert_eq!(generated.len(), 3);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(pieces.concat(), "The capital of France is");
    assert!(text.starts_with(" Paris"), "{text:?}");
}

#[tokio::test]
async fn esp32_runs_stream_the_plan_the_steps_and_the_single_machines_tokens() {
    use kernels_wasm::bitnet::model::{load, par::Single, sample, Cache, Exec, Logits};
    use kernels_wasm::protocol::esp32::{Esp32Event, Esp32Model, Esp32Run};
    let server = start("esp32");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");
    let to = server.dir.join("assets/fixtures/bitnet-cpp");
    std::fs::create_dir_all(&to).unwrap();
    std::fs::copy(fixture, to.join("tiny.i2_s.gguf")).unwrap();
    let mut ws = connect(&server).await;
    let run = |model: Esp32Model, nodes: u32, max_tokens: u32| {
        Request::Esp32Run(Esp32Run {
            model,
            nodes,
            prompt: "The kernel runs the model.".into(),
            max_tokens,
            sram: None,
            psram: Some(300 * 1024),
            link_bps: Some(0),
        })
    };
    let cases = [
        (run(Esp32Model::Fixture, 99, 4), "nodes 99"),
        (run(Esp32Model::Fixture, 2, 0), "max_tokens"),
        (run(Esp32Model::Dummy { size: "7B".into(), quant: "i2_s".into() }, 0, 4), "dummy size"),
        (run(Esp32Model::Path { path: "falcon.gguf".into() }, 1, 4), "falcon"),
    ];
    for (i, (req, needle)) in cases.into_iter().enumerate() {
        request(&mut ws, 10 + i as u64, req).await;
        let (_, code, message) = error_of(recv(&mut ws).await);
        assert!(message.contains(needle), "case {i}: {code:?} {message:?} lacks {needle:?}");
    }
    request(&mut ws, 20, run(Esp32Model::Path { path: "../outside.txt".into() }, 1, 4)).await;
    assert_eq!(error_of(recv(&mut ws).await).1, ErrorCode::PathRefused);

    // The tokens one machine chooses.
    let m = load::load(std::sync::Arc::new(std::fs::read(fixture).unwrap())).unwrap();
    let prompt = m.tokenizer.as_ref().unwrap().encode("The kernel runs the model.", true).unwrap();
    let ex = Exec::best(&Single);
    let mut cache = Cache::new(&m.config, 64);
    let mut logits = m.forward(&prompt, &mut cache, &ex, Logits::Last).unwrap();
    let mut want = Vec::new();
    for _ in 0..8 {
        want.push(sample::greedy(&logits));
        logits = m.forward(&want[want.len() - 1..], &mut cache, &ex, Logits::Last).unwrap();
    }

    request(&mut ws, 1, run(Esp32Model::Fixture, 0, 8)).await;
    let (mut plan, mut loaded, mut steps, mut tokens) = (None, 0, 0, Vec::new());
    let done = loop {
        match recv(&mut ws).await {
            ServerMessage::Event { id: 1, event: Event::Esp32 { event } } => match event {
                Esp32Event::Plan { nodes, layers, .. } => plan = Some((nodes, layers)),
                Esp32Event::Loaded { .. } => loaded += 1,
                Esp32Event::Step { hops, .. } => {
                    assert!(hops.iter().all(|h| h.compute_us > 0 && h.rows > 0));
                    steps += 1;
                }
                Esp32Event::Token { id, .. } => tokens.push(id),
            },
            ServerMessage::Result { id: 1, result: Reply::Esp32Done(s) } => break s,
            other => panic!("unexpected {other:?}"),
        }
    };
    let (nodes, layers) = plan.expect("a plan");
    // 300 KiB of PSRAM holds one of the fixture's two blocks: two nodes, one block each.
    assert_eq!((nodes.len(), layers), (2, 2));
    assert!(nodes.iter().all(|n| n.count == 1 && n.emulated && n.weights + n.kv_cache <= n.psram_budget));
    assert_eq!(loaded, 2);
    assert!(steps >= 8);
    assert_eq!(tokens, want);
    assert_eq!(done.tokens, want);
    assert!(done.modelled_tok_s > 0.0 && done.link_share == 0.0, "{done:?}");
    assert_alive(&mut ws, 99).await;
}
