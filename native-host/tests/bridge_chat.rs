//! `qwengpu_chat` against a real `native-host serve` on loopback, on the tiny random llama (no
//! download): a launch streamed step by step and checked against the interpreter, the
//! conversation going on in its context, turns that cannot run named, a cancelled turn.

mod common;

use common::*;
use kernels_wasm::protocol::qwengpu::{
    By, ChatDone, ChatEvent, ChatModel, ChatTurn, FedPart, TokenKind, MAX_CHAT_TOKENS,
};
use kernels_wasm::protocol::{ClientMessage, ErrorCode, Event, Reply, Request, ServerMessage};
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::suite;

fn turn(conversation: u64, text: &str, max_tokens: u32) -> Request {
    let model = ChatModel::TinyRandom { seed: 3 };
    Request::QwengpuChat(ChatTurn { conversation, model, turn: text.into(), max_tokens, max_steps: 10_000 })
}

/// The turn's chat events, then its end: the reply, or the error frame's code and message.
async fn events(ws: &mut Ws, id: u64) -> (Vec<ChatEvent>, Result<ChatDone, (ErrorCode, String)>) {
    let mut seen = Vec::new();
    loop {
        match recv(ws).await {
            ServerMessage::Event { id: i, event: Event::QwengpuChat { event } } if i == id => seen.push(event),
            ServerMessage::Event { id: i, event: Event::Log { .. } } if i == id => {}
            ServerMessage::Result { id: i, result: Reply::QwengpuChatDone(done) } if i == id => {
                return (seen, Ok(done))
            }
            ServerMessage::Error(e) if e.id == Some(id) => return (seen, Err((e.code, e.message))),
            other => panic!("{other:?}"),
        }
    }
}

/// Every event's tokens (the prompt's counted), which make up the context.
fn tokens_in(events: &[ChatEvent]) -> usize {
    events
        .iter()
        .map(|e| match e {
            ChatEvent::Fed { tokens, .. } => tokens.len(),
            ChatEvent::Prompt { tokens, .. } => *tokens as usize,
            ChatEvent::Step { vals, .. } => 1 + vals.len(),
            ChatEvent::Reply { .. } => 1,
            ChatEvent::Launched { .. } => 1,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn a_launch_streams_its_steps_and_the_conversation_goes_on() {
    let server = start("chat");
    let mut ws = connect(&server).await;
    request(&mut ws, 1, turn(7, "/run reverse", 6)).await;
    let (seen, done) = events(&mut ws, 1).await;
    let done = done.unwrap();

    // The interpreter's run of the same launch: its records and its memory.
    let k = suite::kernels().into_iter().find(|k| k.name == "reverse").unwrap();
    let spec = MachineSpec::second();
    let (_, p, mut m) = k.machine(k.ptx, &spec).unwrap();
    let records: Vec<[u32; 3]> =
        m.run(10_000).unwrap().iter().map(|r| [r.warp as u32, r.block as u32, r.mask]).collect();

    let ChatEvent::Opened { resumed: false, position: 0, text_vocab: 1000, vocab, .. } = seen[0] else {
        panic!("{:?}", seen[0])
    };
    assert!(vocab > 80_000, "{vocab}");
    let ChatEvent::Fed { part: FedPart::Turn, text, tokens } = &seen[1] else { panic!("{:?}", seen[1]) };
    assert!(tokens.iter().all(|t| t.by == By::Host && t.kind == TokenKind::Text));
    assert_eq!(tokens.iter().map(|t| t.text.as_str()).collect::<String>(), *text);
    assert!(matches!(&seen[2], ChatEvent::Prompt { name, tokens, .. } if name == "reverse" && *tokens > 100));
    let steps: Vec<_> = seen.iter().filter(|e| matches!(e, ChatEvent::Step { .. })).collect();
    let got: Vec<[u32; 3]> = steps
        .iter()
        .map(|e| match e {
            ChatEvent::Step { warp, block, mask, .. } => [*warp, *block, *mask],
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(got, records);
    let mut chosen = 0;
    for (i, e) in steps.iter().enumerate() {
        let ChatEvent::Step { step, record, vals, .. } = e else { unreachable!() };
        assert_eq!(*step as usize, i + 1);
        // The model chose the record (the interpreter beside it agreeing) and the VAL tokens.
        assert!(record.by == By::Model && record.kind == TokenKind::Record, "{record:?}");
        assert!(vals.iter().all(|v| v.by == By::Model && v.kind == TokenKind::Val), "{vals:?}");
        chosen += 1 + vals.len() as u64;
    }
    let launched = seen.iter().find_map(|e| match e {
        ChatEvent::Launched { name, steps, chosen, arrays, suite, end, .. } => {
            Some((name, *steps, *chosen, arrays, *suite, end))
        }
        _ => None,
    });
    let (name, n, c, arrays, matches, end) = launched.unwrap();
    // The end record is the model's too.
    assert_eq!((name.as_str(), n, c, matches), ("reverse", records.len() as u64, chosen + 1, Some(true)));
    assert!(end.by == By::Model && end.kind == TokenKind::Record, "{end:?}");
    assert_eq!(*arrays, k.expected(&p));
    // The load mixer's rows hold the memory the interpreter's run left.
    let rows = seen.iter().find_map(|e| if let ChatEvent::Rows(r) = e { Some(r) } else { None }).unwrap();
    assert_eq!(rows.memory, m.global.iter().map(|&w| Some(w)).collect::<Vec<_>>());
    assert_eq!(rows.registers.len(), p.launch.grid * p.launch.block);
    let said = seen.iter().find_map(|e| match e {
        ChatEvent::Fed { part: FedPart::Arrays, text, .. } => Some(text),
        _ => None,
    });
    assert!(said
        .unwrap()
        .starts_with(&format!("The kernel reverse ran in {} steps and left array 1 = [", records.len())));
    let replies: Vec<_> =
        seen.iter().filter_map(|e| if let ChatEvent::Reply { token } = e { Some(token) } else { None }).collect();
    assert!(!replies.is_empty() && replies.len() <= 6 && replies.iter().all(|t| t.by == By::Model));
    assert!(matches!(seen.last(), Some(ChatEvent::Fed { part: FedPart::Close, .. })));
    assert_eq!(tokens_in(&seen), done.position as usize);

    // The next turn goes on in the same context; another conversation starts afresh.
    request(&mut ws, 2, turn(7, "thanks", 3)).await;
    let (again, next) = events(&mut ws, 2).await;
    assert!(matches!(again[0], ChatEvent::Opened { resumed: true, position, .. } if position == done.position));
    assert_eq!(next.unwrap().position as usize, done.position as usize + tokens_in(&again));
    request(&mut ws, 3, turn(8, "hello", 2)).await;
    let (fresh, _) = events(&mut ws, 3).await;
    assert!(matches!(fresh[0], ChatEvent::Opened { resumed: false, position: 0, .. }));
}

#[tokio::test]
async fn chat_turns_that_cannot_run_are_named() {
    let server = start("chat-bad");
    let mut ws = connect(&server).await;
    let bad = [
        (turn(1, "/run nosuch", 4), ErrorCode::BadRequest, "\"nosuch\" is not a suite kernel"),
        // The bridge reads no file for a turn, whatever the path.
        (turn(1, "/run /etc/passwd --block 4", 4), ErrorCode::BadRequest, "is not a suite kernel"),
        (turn(1, "/run reverse --block 4", 4), ErrorCode::BadRequest, "brings its own launch"),
        (turn(1, "/cuda --block 4 --arg [1,2", 4), ErrorCode::BadRequest, ""),
        (turn(1, "  ", 4), ErrorCode::BadRequest, "turn: give 1 to"),
        (turn(1, "hi", 0), ErrorCode::BadRequest, "max_tokens 0"),
        (turn(1, "hi", MAX_CHAT_TOKENS + 1), ErrorCode::BadRequest, "max_tokens"),
        (
            Request::QwengpuChat(ChatTurn {
                conversation: 2,
                model: ChatModel::Path { path: "../outside.txt".into() },
                turn: "hi".into(),
                max_tokens: 4,
                max_steps: 10,
            }),
            ErrorCode::PathRefused,
            "",
        ),
        (
            Request::QwengpuChat(ChatTurn {
                conversation: 2,
                model: ChatModel::Path { path: "falcon.gguf".into() },
                turn: "hi".into(),
                max_tokens: 4,
                max_steps: 10,
            }),
            ErrorCode::BadRequest,
            "falcon",
        ),
    ];
    for (i, (request_, code, says)) in bad.into_iter().enumerate() {
        let id = 10 + i as u64;
        request(&mut ws, id, request_).await;
        let (_, end) = events(&mut ws, id).await;
        let (got, message) = end.unwrap_err();
        assert_eq!(got, code, "{i}: {message}");
        assert!(message.contains(says), "{i}: {message}");
    }
    // A launch over its step limit is named, and the conversation goes on.
    let model = ChatModel::TinyRandom { seed: 3 };
    let short = ChatTurn { conversation: 1, model, turn: "/run reverse".into(), max_tokens: 2, max_steps: 3 };
    request(&mut ws, 30, Request::QwengpuChat(short)).await;
    let (_, end) = events(&mut ws, 30).await;
    let (code, message) = end.unwrap_err();
    assert!(code == ErrorCode::BadRequest && message.contains("3 steps"), "{message}");
    request(&mut ws, 31, turn(1, "hi", 2)).await;
    let (seen, end) = events(&mut ws, 31).await;
    assert!(end.is_ok() && matches!(seen[0], ChatEvent::Opened { resumed: true, .. }));
}

#[tokio::test]
async fn a_cancelled_turn_stops_and_the_conversation_goes_on() {
    let server = start("chat-cancel");
    let mut ws = connect(&server).await;
    request(&mut ws, 1, turn(5, "/run reverse", 4)).await;
    loop {
        match recv(&mut ws).await {
            ServerMessage::Event { event: Event::QwengpuChat { event: ChatEvent::Step { .. } }, .. } => break,
            ServerMessage::Event { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    send(&mut ws, &ClientMessage::Cancel { id: 1 }).await;
    let (_, end) = events(&mut ws, 1).await;
    assert_eq!(end.unwrap_err().0, ErrorCode::Cancelled);
    // The turn's thread notices at its next step and closes the launch in the context; the slot
    // is then free again (busy only in that short window).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut id = 2;
    let seen = loop {
        request(&mut ws, id, turn(5, "/run reverse", 2)).await;
        match events(&mut ws, id).await {
            (seen, Ok(_)) => break seen,
            (_, Err((ErrorCode::Busy, _))) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                id += 1;
            }
            (_, other) => panic!("the conversation was not released: {other:?}"),
        }
    };
    assert!(matches!(seen[0], ChatEvent::Opened { resumed: true, position, .. } if position > 0));
    assert!(seen.iter().any(|e| matches!(e, ChatEvent::Launched { suite: Some(true), .. })));
}

/// SmolLM2 from the models directory, where the test run has it: the conversation opens with its
/// default system turn, and a text turn's reply is SmolLM2's text.
#[tokio::test]
async fn a_text_turn_on_the_real_model() {
    if std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").is_none_or(|p| p.is_empty()) {
        eprintln!("SKIPPED: SUBSTRATES_SMOLLM2_GGUF not set (cargo xtask test fetches the model and sets it)");
        return;
    }
    let server = start("chat-smollm2");
    let mut ws = connect(&server).await;
    let model = ChatModel::Path { path: "smollm2.gguf".into() };
    let t = ChatTurn { conversation: 1, model, turn: "What is 2 + 2?".into(), max_tokens: 3, max_steps: 10 };
    request(&mut ws, 1, Request::QwengpuChat(t)).await;
    let (seen, end) = events(&mut ws, 1).await;
    let done = end.unwrap();
    let ChatEvent::Opened { resumed: false, position, text_vocab, compiled_layers, .. } = &seen[0] else {
        panic!("{:?}", seen[0])
    };
    assert!(*position > 10 && *text_vocab == 49_152 && *compiled_layers > 30, "{:?}", seen[0]);
    let reply: String = seen
        .iter()
        .filter_map(|e| if let ChatEvent::Reply { token } = e { Some(token.text.as_str()) } else { None })
        .collect();
    assert_eq!(reply, done.reply);
    assert!(!reply.trim().is_empty());
}
