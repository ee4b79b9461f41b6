//! The spliced model written as a checkpoint (`qwengpu splice -o`) runs bit for bit as the model
//! it was written from; a corrupt checkpoint is named, not run; and on the real SmolLM2,
//! `qwengpu drift --load` measures from the written files.

use kernels_wasm::qwen3::model::{Config, FloatModel, Model};
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::splice::{Compiled, Runner, Splice};
use native_host::qwengpu::checkpoint::{self, write};
use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("substrates-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The tiny llama that can be spliced, and its splice.
fn tiny() -> (Config, FloatModel, Splice) {
    let c = kernels_wasm::qwengpu::splice::TINY_TEXT;
    (c, Model::random_float(c, 8), Splice::new(c).unwrap())
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn a_checkpoint_runs_as_the_model_it_was_written_from() {
    let (c, model, splice) = tiny();
    let dir = scratch("tiny");
    write(&dir, c, &model, &splice, &splice.norms(&model), "test").unwrap();
    let loaded = checkpoint::load(&dir).unwrap();
    assert_eq!(loaded.splice.sizes(), splice.sizes());
    let mut before = Runner::spliced(c, &model, &splice).unwrap();
    let mut after = Runner::spliced_with(loaded.config, &loaded.model, &loaded.splice, loaded.norms.clone()).unwrap();
    let mut plain = Runner::plain(loaded.config, &loaded.model).unwrap();
    let mut reference = Runner::plain(c, &model).unwrap();
    let machine = [Token::Val(0xbeef), Token::Record { warp: 1, block: 2, mask: 3 }].map(|t| splice.token_id(t));
    for t in [3, 999, 0, 42].into_iter().chain(machine).chain([7]) {
        let (a, b) = (before.forward(t).unwrap(), after.forward(t).unwrap());
        assert!(same_bits(&a, &b), "token {t}");
        if t < c.vocab {
            assert!(same_bits(&plain.forward(t).unwrap(), &reference.forward(t).unwrap()), "token {t}, plain");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Each corruption is an error that names what is wrong.
#[test]
fn corrupt_checkpoints_are_named() {
    let (c, model, splice) = tiny();
    let dir = scratch("corrupt");
    let norms = splice.norms(&model);
    let fails = |why: &str| {
        let e = format!("{:#}", checkpoint::load(&dir).err().expect("a corrupt checkpoint loaded"));
        assert!(e.contains(why), "expected {why:?} in: {e}");
    };
    write(&dir, c, &model, &splice, &norms, "test").unwrap();
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let tensors = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), "{\"format\": 3").unwrap();
    fails("not a spliced checkpoint's config");
    std::fs::write(
        dir.join("config.json"),
        config.replace(&format!("\"version\": {}", checkpoint::VERSION), "\"version\": 1"),
    )
    .unwrap();
    fails("version 1");
    std::fs::write(dir.join("config.json"), config.replace("\"machine\": 98304", "\"machine\": 98305")).unwrap();
    fails("the vocabulary does not add up");
    // One more compiled layer than the file holds.
    let extra = config.replacen(
        "{\n      \"kind\": \"text_decoder\"",
        "{\"kind\": \"compiled_swiglu\", \"name\": \"extra\", \"units\": 2},\n    {\n      \"kind\": \"text_decoder\"",
        1,
    );
    std::fs::write(dir.join("config.json"), extra).unwrap();
    fails(&format!("tensor machine.{}.gate.rows is missing", splice.layers.len()));
    std::fs::write(dir.join("config.json"), &config).unwrap();
    std::fs::write(dir.join("model.safetensors"), &tensors[..tensors.len() / 2]).unwrap();
    fails("is not a safetensors file");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    fails("model.safetensors");
    // A weight pointing past the stream.
    let mut bad = splice.clone();
    let Compiled::SwiGlu(l) = &mut bad.layers[1] else { panic!("layer 1 is the decoders' SwiGLU") };
    l.units[0].gate[0].0 = bad.width + 5;
    write(&dir, c, &model, &bad, &norms, "test").unwrap();
    fails("machine.1.gate: entry 0");
    // A register file on another stream.
    let mut bad = splice.clone();
    bad.registers.first = bad.width - 10;
    write(&dir, c, &model, &bad, &norms, "test").unwrap();
    fails("lies outside the stream");
    // An executor reading other ROM channels than the register file writes.
    let mut bad = splice.clone();
    bad.exec.rom += 3;
    write(&dir, c, &model, &bad, &norms, "test").unwrap();
    fails("the executor's channels do not match");
    let _ = std::fs::remove_dir_all(dir);
}

/// On the real SmolLM2: `qwengpu splice -o`, then `qwengpu drift --load` from the files (KL 0,
/// 10/10 prompts), the saved tokenizer giving the GGUF's ids and chat template, and `qwengpu run
/// --load`.
#[test]
fn smollm2_spliced_to_disk_and_measured_from_it() {
    let Some(gguf) = std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()) else {
        eprintln!("SKIPPED: SUBSTRATES_SMOLLM2_GGUF not set (cargo xtask test fetches the model and sets it)");
        return;
    };
    let dir = scratch("smollm2");
    let bin = env!("CARGO_BIN_EXE_native-host");
    let out = Command::new(bin).args(["qwengpu", "splice", "-m"]).arg(&gguf).arg("-o").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    let compiled = Splice::new(kernels_wasm::qwengpu::splice::TINY_TEXT).unwrap().sizes().machine_layers;
    let layers = format!("{} decoder layers: {compiled} compiled", compiled + 30);
    assert!(said.contains(&layers) && said.contains("2304 channels"), "{said}");
    let out = Command::new(bin)
        .args(["qwengpu", "drift", "--json", "--positions", "40", "--passage", "41", "--steps", "2", "--load"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: kernels_wasm::qwengpu::splice::drift::Drift = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((d.positions, d.mean_kl, d.max_kl, d.greedy_identical), (40, 0.0, 0.0, 10));
    let text = std::fs::read_to_string(native_host::qwengpu::drift::default_text()).unwrap();
    let gguf_tokenizer = native_host::ebpf::models::load(gguf.as_ref(), None).unwrap().tokenizer.unwrap();
    let saved = checkpoint::tokenizer(&dir).unwrap();
    assert_eq!(saved.encode(&text).unwrap(), gguf_tokenizer.encode(&text).unwrap());
    // `chat --load` opens with the GGUF's default system turn.
    assert!(saved.default_system.is_some() && saved.default_system == gguf_tokenizer.default_system);
    // A kernel outside the suite inside the checkpoint: SmolLM2's argmax picks every VAL token,
    // and the arrays its store tokens carry are the plain Rust hash's.
    let x = [1u32, 0x8000_0000, 0xdead_beef, u32::MAX];
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernels/rotate_hash.cu");
    let out = Command::new(bin)
        .args(["qwengpu", "run", kernel, "--json", "--block", "4", "--load"])
        .arg(&dir)
        .args([format!("--arg=[{}]", x.map(|v| v.to_string()).join(",")), "--arg=zeros:4".into()])
        .args(["--arg=2", "--arg=4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hash =
        |v: u32| (0..2).fold(v, |v, r| (v.rotate_left(5) ^ 0x9e37_79b9u32.wrapping_add(r)).wrapping_mul(0x85eb_ca6b));
    let arrays: Vec<Vec<u32>> = serde_json::from_value(v["arrays"].clone()).unwrap();
    assert_eq!(arrays, vec![x.to_vec(), x.map(hash).to_vec()], "{v}");
    assert!(v["steps"].as_u64().unwrap() > 4 && v["tokens"].as_u64().unwrap() > 1000, "{v}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `run --load` names a directory that holds no checkpoint.
#[test]
fn run_from_a_missing_checkpoint_is_named() {
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernels/rotate_hash.cu");
    let dir = scratch("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_native-host"))
        .args(["qwengpu", "run", kernel, "--block", "4", "--arg=[1]", "--arg=zeros:1", "--arg=1", "--arg=1", "--load"])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("config.json"), "{err}");
}
