//! A whole BitNet model in the page: bitnet.cpp's own tiny model (embedded), or a dummy layout
//! generated here from a seed, run token by token on this tab's thread with the wasm kernels.

use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::blob::Shared;
use kernels_wasm::bitnet::model::config::Config;
use kernels_wasm::bitnet::model::forward::Exec;
use kernels_wasm::bitnet::model::par::Single;
use kernels_wasm::bitnet::model::sample::Sampler;
use kernels_wasm::bitnet::model::{dummy, load, table, write, Cache, Logits, Model, Quant};
use kernels_wasm::gguf::GgmlType;
use std::sync::Arc;

/// bitnet.cpp's tiny model (`assets/fixtures/bitnet-cpp`), 614 KB.
const FIXTURE: &[u8] = include_bytes!("../../../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");
/// The prompt bitnet.cpp ran on it, and the longest context the page allocates.
pub const FIXTURE_PROMPT: &str = "The kernel runs the model.";
pub const CONTEXT: usize = 512;

/// Where the model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// bitnet.cpp's file, as it made it.
    Fixture,
    /// A dummy layout generated in the page.
    Dummy { size: &'static str, quant: Quant },
}

impl Source {
    pub const ALL: [Source; 5] = [
        Source::Fixture,
        Source::Dummy { size: "tiny", quant: Quant::I2s },
        Source::Dummy { size: "125M", quant: Quant::I2s },
        Source::Dummy { size: "125M", quant: Quant::Tl1 },
        Source::Dummy { size: "125M", quant: Quant::Tl2 },
    ];

    pub fn label(self) -> String {
        match self {
            Source::Fixture => "bitnet.cpp's tiny model (I2_S, 614 KB)".into(),
            Source::Dummy { size, quant } => format!("dummy {size}, {}, generated here", quant.name().to_uppercase()),
        }
    }
}

/// A loaded model, its cache and what it cost to get.
pub struct Demo {
    pub model: Model,
    pub cache: Cache,
    pub file_bytes: usize,
}

/// The model file's bytes: the embedded fixture, or a dummy written here (seconds for 125M).
pub fn model_bytes(source: Source, seed: u64) -> Result<Vec<u8>, String> {
    Ok(match source {
        Source::Fixture => FIXTURE.to_vec(),
        Source::Dummy { size, quant } => {
            let c = Config::dummy(size).ok_or_else(|| format!("no dummy layout {size}"))?;
            let name = format!("bitnet-dummy-{size}");
            let tensors = write::tensors(&c, quant, GgmlType::F16, false);
            write::to_bytes(&dummy::metadata(&c, &name, quant), &tensors, |t, k| Ok(dummy::values(seed, t, k)))
                .map_err(|e| e.to_string())?
        }
    })
}

/// Builds (or reads) the model; a dummy takes seconds for 125M.
pub fn build(source: Source, seed: u64) -> Result<Demo, String> {
    let bytes = model_bytes(source, seed)?;
    let file_bytes = bytes.len();
    let shared: Shared = Arc::new(bytes);
    let model = load::load(shared).map_err(|e| e.to_string())?;
    let cache = Cache::new(&model.config, CONTEXT.min(model.config.context));
    Ok(Demo { model, cache, file_bytes })
}

/// One generation in progress.
pub struct Generation {
    pub prompt_tokens: usize,
    pub tokens: Vec<u32>,
    pub text: Vec<u8>,
    logits: Vec<f32>,
    sampler: Sampler,
    pub done: bool,
    /// Milliseconds spent in the model, prompt and generation apart.
    pub prompt_ms: f64,
    pub gen_ms: f64,
    /// Each generated token's forward pass, in ms (what the tab's chart draws).
    pub token_ms: Vec<f64>,
}

fn exec(backend: Backend) -> Exec<'static> {
    Exec { backend, par: &Single, simd: backend != Backend::Scalar && table::simd_available(), reference: false }
}

impl Demo {
    /// Clears the cache and feeds the prompt (after BOS).
    pub fn start(
        &mut self,
        prompt: &str,
        temp: f32,
        seed: u64,
        backend: Backend,
        now: &mut dyn FnMut() -> f64,
    ) -> Result<Generation, String> {
        let tok = self.model.tokenizer.as_ref().ok_or("the model has no tokenizer")?;
        let ids = tok.encode(prompt, true).map_err(|e| e.to_string())?;
        if ids.len() >= self.cache.context {
            return Err(format!("the prompt is {} tokens; the page's context is {}", ids.len(), self.cache.context));
        }
        self.cache.clear();
        let t = now();
        let logits =
            self.model.forward(&ids, &mut self.cache, &exec(backend), Logits::Last).map_err(|e| e.to_string())?;
        Ok(Generation {
            prompt_tokens: ids.len(),
            text: tok.decode(&ids),
            tokens: Vec::new(),
            logits,
            sampler: Sampler::new(temp, seed),
            done: false,
            prompt_ms: now() - t,
            gen_ms: 0.0,
            token_ms: Vec::new(),
        })
    }

    /// Samples and feeds one more token; `done` at EOS or the end of the context.
    pub fn step(&mut self, g: &mut Generation, backend: Backend, now: &mut dyn FnMut() -> f64) -> Result<(), String> {
        let tok = self.model.tokenizer.as_ref().ok_or("the model has no tokenizer")?;
        let next = g.sampler.sample(&g.logits);
        if Some(next) == tok.eos || self.cache.len >= self.cache.context {
            g.done = true;
            return Ok(());
        }
        g.tokens.push(next);
        g.text.extend(tok.piece(next));
        let t = now();
        g.logits =
            self.model.forward(&[next], &mut self.cache, &exec(backend), Logits::Last).map_err(|e| e.to_string())?;
        let ms = now() - t;
        g.gen_ms += ms;
        g.token_ms.push(ms);
        Ok(())
    }
}

impl Generation {
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens.len() as f64 / (self.gen_ms / 1e3).max(1e-9)
    }

    /// (token number from 1, tokens per second of that token's forward pass).
    pub fn rate_by_token(&self) -> Vec<(f64, f64)> {
        self.token_ms.iter().enumerate().map(|(i, ms)| ((i + 1) as f64, 1e3 / ms.max(1e-6))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn the_page_prints_what_bitnet_cpp_printed() {
        let want = include_bytes!("../../../assets/fixtures/bitnet-cpp/greedy-32.bin");
        let mut d = build(Source::Fixture, 0).unwrap();
        let mut clock = 0.0;
        let mut now = || {
            clock += 1.0;
            clock
        };
        for backend in Backend::available() {
            let mut g = d.start(FIXTURE_PROMPT, 0.0, 0, backend, &mut now).unwrap();
            assert_eq!(g.prompt_tokens, 10);
            for _ in 0..32 {
                d.step(&mut g, backend, &mut now).unwrap();
            }
            assert_eq!(&g.text[1 + FIXTURE_PROMPT.len()..], &want[..want.len() - 2], "{backend:?}");
            assert!(g.tokens_per_s() > 0.0);
            // The clock ticks 1 ms per reading: each forward pass took 1 ms, 1000 tok/s.
            let rates = g.rate_by_token();
            assert_eq!(rates.len(), g.tokens.len());
            assert!(rates.iter().enumerate().all(|(i, &(n, r))| n == (i + 1) as f64 && r == 1e3), "{rates:?}");
        }
    }

    #[test]
    fn a_dummy_model_builds_and_generates_in_every_format() {
        for quant in Quant::ALL {
            let mut d = build(Source::Dummy { size: "tiny", quant }, 1).unwrap();
            let mut now = || 0.0;
            let mut g = d.start("hello", 0.8, 2, Backend::best(), &mut now).unwrap();
            for _ in 0..4 {
                d.step(&mut g, Backend::best(), &mut now).unwrap();
            }
            // Four tokens, or fewer if the random model chose EOS.
            assert!(g.text.starts_with(b" hello") && (g.tokens.len() == 4 || g.done), "{quant:?}");
        }
        let too_long = "word ".repeat(CONTEXT);
        let mut d = build(Source::Dummy { size: "tiny", quant: Quant::I2s }, 1).unwrap();
        let e = d.start(&too_long, 0.0, 0, Backend::Scalar, &mut || 0.0).err().unwrap_or_default();
        assert!(e.contains("context"), "{e}");
    }
}
