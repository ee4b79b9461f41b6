//! `ebpf_run`: greedy generation with every Qwen3 operator in the kernel, streamed to the page as
//! tokens and per-token traces of the BPF calls. One run at a time per host: the programs' maps
//! are the kernel's, and two runs would fight over memory and cores.

use super::job::{bad, Job};
use super::requests::Failure;
use crate::ebpf::forward::BpfModel;
use crate::ebpf::models;
use kernels_wasm::protocol::ebpf::{
    EbpfModel, EbpfPrompt, TopLogit, VerifierStat, MAX_EBPF_PROMPT, MAX_EBPF_PROMPT_TEXT, MAX_EBPF_TOKENS,
};
use kernels_wasm::protocol::{ErrorCode, Event, FileRoot, Reply};
use kernels_wasm::qwen3::model::{Config, Model};
use kernels_wasm::qwen3::reference::{top_k, Reference};
use std::time::Instant;

impl Job {
    pub fn ebpf_run(
        self,
        model: EbpfModel,
        prompt: EbpfPrompt,
        max_tokens: u32,
        threads: u32,
    ) -> Result<Reply, Failure> {
        match &prompt {
            EbpfPrompt::Ids { ids } if ids.is_empty() || ids.len() > MAX_EBPF_PROMPT => {
                return Err(bad(format!("prompt: give 1 to {MAX_EBPF_PROMPT} token ids (got {})", ids.len())));
            }
            EbpfPrompt::Text { text, .. } if text.is_empty() || text.len() > MAX_EBPF_PROMPT_TEXT => {
                return Err(bad(format!(
                    "prompt: give 1 to {MAX_EBPF_PROMPT_TEXT} bytes of text (got {})",
                    text.len()
                )));
            }
            _ => {}
        }
        if max_tokens == 0 || max_tokens > MAX_EBPF_TOKENS {
            return Err(bad(format!("max_tokens {max_tokens}: give 1 to {MAX_EBPF_TOKENS}")));
        }
        if !(1..=2).contains(&threads) {
            return Err(bad(format!("threads {threads}: give 1 or 2")));
        }
        let Ok(_held) = self.lock.try_lock() else {
            return Err(Failure { code: ErrorCode::Busy, message: "another eBPF run holds the kernel maps".into() });
        };
        crate::ebpf::require_kernel().map_err(|e| Failure { code: ErrorCode::Io, message: e.to_string() })?;
        let loaded = match model {
            EbpfModel::TinyRandom { seed } => models::Loaded {
                config: Config::TINY,
                float: Model::random_float(Config::TINY, seed),
                tokenizer: None,
                format: format!("tiny random Qwen3 (seed {seed})"),
            },
            EbpfModel::Path { path } => {
                let path = self.roots.resolve(FileRoot::Models, &path)?;
                models::load(&path, None).map_err(|e| bad(e.to_string()))?
            }
        };
        let (config, float, tokenizer) = (loaded.config, &loaded.float, loaded.tokenizer.as_ref());
        let model = Model::from_float(config, float).map_err(|e| bad(e.to_string()))?;
        let mut reference = Reference::new(config, float);
        let prompt: Vec<u32> = match prompt {
            EbpfPrompt::Ids { ids } => ids,
            EbpfPrompt::Text { text, chat } => {
                let t = tokenizer.ok_or_else(|| bad(format!("{} has no tokenizer: give token ids", loaded.format)))?;
                let text = if chat { t.chat_prompt(&text) } else { text };
                let ids = t.encode(&text).map_err(|e| bad(e.to_string()))?;
                ids.into_iter().map(|i| i as u32).collect()
            }
        };
        if prompt.is_empty() || prompt.len() > MAX_EBPF_PROMPT {
            return Err(bad(format!("prompt: {} tokens; the limit is 1 to {MAX_EBPF_PROMPT}", prompt.len())));
        }
        if let Some(t) = prompt.iter().find(|&&t| t as usize >= model.config.vocab) {
            return Err(bad(format!("prompt token {t} is outside the vocabulary of {} tokens", model.config.vocab)));
        }
        let piece = |id: u32| tokenizer.and_then(|t| t.decode(&[id as usize]).ok()).unwrap_or_default();
        let c = config;
        self.event(Event::EbpfPrompt {
            model: format!("{}: {} layers, hidden {}, vocab {}", loaded.format, c.layers, c.hidden, c.vocab),
            pieces: prompt.iter().map(|&id| piece(id)).collect(),
            ids: prompt.clone(),
        });
        let positions = prompt.len() + max_tokens as usize;
        let internal = |e: crate::ebpf::EbpfError| Failure { code: ErrorCode::Internal, message: e.to_string() };
        let mut bpf = BpfModel::load(&model, positions, threads as usize).map_err(internal)?;
        bpf.trace = Some(Vec::new());
        let mut programs: Vec<VerifierStat> = bpf
            .ops
            .verifier_stats()
            .into_iter()
            .map(|(program, n)| VerifierStat { program: program.into(), instructions: n.unwrap_or(0) })
            .collect();
        programs.push(VerifierStat { program: "qwen3_matvec".into(), instructions: bpf.matvec_verified_insns() });
        self.event(Event::EbpfVerifier { programs });

        let (mut generated, mut next) = (Vec::new(), prompt[0] as usize);
        let start = Instant::now();
        let calls_start = bpf.calls();
        for pos in 0..positions - 1 {
            if self.cancelled() {
                return Err(Failure { code: ErrorCode::Cancelled, message: "cancelled".into() });
            }
            let in_prompt = pos + 1 < prompt.len();
            let token = if pos < prompt.len() { prompt[pos] as usize } else { next };
            let (t, calls) = (Instant::now(), bpf.calls());
            let step = bpf.forward(token, pos).map_err(internal)?;
            let ref_logits = reference.forward(token);
            let reference_top =
                top_k(&ref_logits, 5).into_iter().map(|i| TopLogit { token: i as u32, logit: ref_logits[i] }).collect();
            let mut order: Vec<usize> = (0..step.logits.len()).collect();
            order.select_nth_unstable_by(4, |&a, &b| step.logits[b].cmp(&step.logits[a]).then(a.cmp(&b)));
            order.truncate(5);
            order.sort_by(|&a, &b| step.logits[b].cmp(&step.logits[a]).then(a.cmp(&b)));
            let top =
                order.iter().map(|&i| TopLogit { token: i as u32, logit: step.logits[i] as f32 / 65536.0 }).collect();
            next = step.argmax;
            if !in_prompt {
                generated.push(next as u32);
            }
            self.event(Event::EbpfToken {
                pos: pos as u32,
                token: next as u32,
                prompt: in_prompt,
                top,
                reference_top,
                seconds: t.elapsed().as_secs_f64(),
                calls: (bpf.calls() - calls) as u32,
                text: piece(next as u32),
            });
            let spans = bpf.trace.as_mut().map(std::mem::take).unwrap_or_default();
            self.event(Event::EbpfTrace { pos: pos as u32, spans });
        }
        let steps = (positions - 1).max(1) as f64;
        Ok(Reply::EbpfDone {
            generated,
            seconds_per_token: start.elapsed().as_secs_f64() / steps,
            calls_per_token: (bpf.calls() - calls_start) as f64 / steps,
        })
    }
}
