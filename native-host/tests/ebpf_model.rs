//! Qwen3 directories: generated, loaded, run in the kernel (logits equal to the golden model),
//! and every kind of bad directory refused with an error that names what is wrong.

use kernels_wasm::qwen3::model::{Cache, Config, Model};
use native_host::ebpf::forward::BpfModel;
use native_host::ebpf::hf::{self, ModelError};
use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("substrates-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn tiny_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    hf::write_random(&dir, Config::TINY, 3).unwrap();
    dir
}

#[test]
fn a_generated_directory_loads_and_runs_in_the_kernel_like_the_golden_model() {
    let dir = tiny_dir("load");
    let model = hf::load(&dir).unwrap();
    assert_eq!(model.config, Config::TINY);
    // BF16 on disk: the loaded model is the generator's weights rounded to BF16, so it differs
    // from the unrounded conversion but only by that rounding.
    let direct = Model::from_float(Config::TINY, &Model::random_float(Config::TINY, 3)).unwrap();
    assert_eq!(model.embed.len(), direct.embed.len());
    assert!(model.embed.iter().zip(&direct.embed).all(|(a, b)| (a - b).abs() <= 1 << 9), "BF16 keeps 8 bits");
    if !native_host::probe::ebpf().available {
        eprintln!("SKIPPED the kernel half: {}", native_host::probe::ebpf().detail);
        return;
    }
    let mut bpf = BpfModel::load(&model, 4, 2).unwrap();
    // The seed's BF16 → Q24 table variant: on BF16 weights it stores the same values, so the
    // logits are byte-identical to the Q24 words'.
    use kernels_wasm::qwen3::weights::WeightFormat;
    assert!(model.with_weights(WeightFormat::Bf16Table) == model);
    let mut bf16 = BpfModel::load_as(&model, 4, 2, WeightFormat::Bf16Table).unwrap();
    let mut cache = Cache::default();
    for (pos, token) in [17usize, 3, 999, 3].into_iter().enumerate() {
        let golden = model.forward(token, pos, &mut cache).logits;
        assert_eq!(bpf.forward(token, pos).unwrap().logits, golden);
        assert_eq!(bf16.forward(token, pos).unwrap().logits, golden);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_directories_are_named() {
    let missing = scratch("missing");
    let err = hf::load(&missing).unwrap_err();
    assert!(matches!(err, ModelError::Io { .. }) && err.to_string().contains("config.json"), "{err}");

    let dir = tiny_dir("bad");
    let st = dir.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    // Truncated: the header promises more data than the file holds.
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let err = hf::load(&dir).unwrap_err();
    assert!(matches!(err, ModelError::Safetensors { .. }), "{err}");
    // Garbage.
    std::fs::write(&st, b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a header").unwrap();
    assert!(matches!(hf::load(&dir).unwrap_err(), ModelError::Safetensors { .. }));
    std::fs::write(&st, &bytes).unwrap();
    assert!(hf::load(&dir).is_ok());

    let config = dir.join("config.json");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, good.replace("Qwen3ForCausalLM", "MambaForCausalLM")).unwrap();
    let err = hf::load(&dir).unwrap_err();
    assert!(err.to_string().contains("MambaForCausalLM"), "{err}");
    std::fs::write(&config, good.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3")).unwrap();
    let err = hf::load(&dir).unwrap_err();
    assert!(
        err.to_string().contains("model.layers.2.input_layernorm.weight") && err.to_string().contains("missing"),
        "{err}"
    );
    std::fs::write(&config, "{ not json").unwrap();
    assert!(matches!(hf::load(&dir).unwrap_err(), ModelError::Config { .. }));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_run_cli_streams_tokens_and_says_where_it_ran() {
    let dir = tiny_dir("cli");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_native-host"))
            .args(["ebpf", "run", "--model"])
            .arg(&dir)
            .args(["--ids", "1,2,3", "-n", "4"])
            .args(extra)
            .output()
            .unwrap()
    };
    let user = run(&["--userspace"]);
    assert!(user.status.success(), "{}", String::from_utf8_lossy(&user.stderr));
    assert!(String::from_utf8_lossy(&user.stderr).contains("USERSPACE"));
    let tokens = String::from_utf8_lossy(&user.stdout).split_whitespace().count();
    assert_eq!(tokens, 4);
    if native_host::probe::ebpf().available {
        let kernel = run(&[]);
        assert!(kernel.status.success(), "{}", String::from_utf8_lossy(&kernel.stderr));
        // The same greedy tokens: the kernel computes the golden model's logits exactly.
        assert_eq!(kernel.stdout, user.stdout);
        assert!(String::from_utf8_lossy(&kernel.stderr).contains("bpf calls/token"));
    }
    // Text prompts go through the official Qwen3 tokenizer (fetched by cargo xtask test).
    if let Some(tok) = std::env::var_os("SUBSTRATES_QWEN3_TOKENIZER").filter(|p| !p.is_empty()) {
        let text = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_native-host"))
                .args(["ebpf", "run", "--userspace", "-n", "3", "--model"])
                .arg(&dir)
                .arg("--tokenizer")
                .arg(&tok)
                .args(args)
                .output()
                .unwrap()
        };
        let ok = text(&["--prompt", ","]); // id 11: inside the tiny model's 1,000-token vocabulary
        assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
        assert!(String::from_utf8_lossy(&ok.stderr).contains("prompt: 1 tokens [11]"));
        let big = text(&["--prompt", "Hello, world!"]); // 9707 and 1879 are not
        assert!(String::from_utf8_lossy(&big.stderr).contains("token 9707 is outside the vocabulary"));
    } else {
        eprintln!("SKIPPED the text prompts: SUBSTRATES_QWEN3_TOKENIZER not set (cargo xtask test sets it)");
    }
    // Logits and the trace, written as JSON lines.
    if native_host::probe::ebpf().available {
        let (logits, trace) = (dir.join("logits.jsonl"), dir.join("trace.jsonl"));
        let dumped = Command::new(env!("CARGO_BIN_EXE_native-host"))
            .args(["ebpf", "run", "--ids", "1,2", "-n", "2", "--model"])
            .arg(&dir)
            .arg("--dump-logits")
            .arg(&logits)
            .arg("--trace")
            .arg(&trace)
            .output()
            .unwrap();
        assert!(dumped.status.success(), "{}", String::from_utf8_lossy(&dumped.stderr));
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(&logits).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3); // 2 prompt positions + 1 more generated position
        assert_eq!(lines[0]["logits"].as_array().unwrap().len(), Config::TINY.vocab);
        let traces = std::fs::read_to_string(&trace).unwrap();
        assert!(traces.lines().all(|l| l.contains("\"op\":\"attention\"")), "{traces}");
    }
    let bad = run(&["--ids", "5000"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("outside the vocabulary"));
    let bad = run(&["--weights", "int3"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("q24, bf16-table, int4-g128"));
    // A research storage: the kernel and its golden model (--userspace) pick the same tokens.
    if native_host::probe::ebpf().available {
        let (k, u) = (run(&["--weights", "int4-g128"]), run(&["--weights", "int4-g128", "--userspace"]));
        assert!(k.status.success() && u.status.success(), "{}", String::from_utf8_lossy(&k.stderr));
        assert_eq!(k.stdout, u.stdout);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `ebpf bench` on the tiny shape: the table it prints (no timing asserted).
#[test]
fn the_bench_cli_prints_its_table() {
    if !native_host::probe::ebpf().available {
        eprintln!("SKIPPED: {}", native_host::probe::ebpf().detail);
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["ebpf", "bench", "--shape", "tiny", "-n", "2", "--weights", "bf16-table"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for needle in [
        "verifier: qwen3_attention",
        "vocab + final norm + argmax",
        "tracing every BPF call",
        "weights bf16-table",
        "logits identical",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}
