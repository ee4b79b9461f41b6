//! The qwenGPU tab's second design: a suite kernel launched inside the second machine spliced
//! into a language model, in this page (`splice::launch`). The host feeds the prompt; the
//! model's own argmax picks every record and VAL token after it, each checked against the
//! interpreter. After each step's last token the panel reads the machine back out of the model's
//! DeltaNet rows (registers, every lane's PC, global memory) and keeps it beside the interpreter's.
//!
//! The language model here is the tiny random llama the tests splice (`splice::TINY_TEXT`, hidden
//! 576 like SmolLM2-135M, so the compiled layers are the same): the page holds no downloaded
//! weights. The conversation panel runs the spliced SmolLM2 through the bridge.

use super::qwengpu::{lanes, MAX_STEPS};
use kernels_wasm::protocol::qwengpu::{MachineRows, RegisterRow};
use kernels_wasm::qwen3::model::{FloatModel, Model};
use kernels_wasm::qwengpu::interp::{Machine, StepRecord};
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::lower::Kernel;
use kernels_wasm::qwengpu::machine_tokens::Token;
use kernels_wasm::qwengpu::sequencer::EXITED;
use kernels_wasm::qwengpu::splice::launch::{launch_observed, Fed, Launched};
use kernels_wasm::qwengpu::splice::{Runner, SentRegisters, Sizes, Splice, TINY_TEXT};
use kernels_wasm::qwengpu::suite::{Prepared, SuiteKernel};
use std::ops::ControlFlow;
use std::sync::OnceLock;

/// The tiny llama's weights (any seed: the machine's tokens do not depend on them).
const SEED: u64 = 3;

/// The spliced model: the text model's weights and the splice.
pub struct SplicedModel {
    pub model: FloatModel,
    pub splice: Splice,
}

/// The page's one spliced model, built on first use: it lives as long as the page, so runners
/// borrow it for `'static`, and a panel mounted again (the tab left and opened) reuses it.
static PAGE_MODEL: OnceLock<SplicedModel> = OnceLock::new();

impl SplicedModel {
    pub fn build() -> Result<SplicedModel, String> {
        let splice = Splice::new(TINY_TEXT).map_err(|e| format!("building the splice: {e}"))?;
        Ok(SplicedModel { model: Model::random_float(TINY_TEXT, SEED), splice })
    }

    /// The page's model ([`PAGE_MODEL`]), built the first time.
    pub fn page() -> Result<&'static SplicedModel, String> {
        if let Some(m) = PAGE_MODEL.get() {
            return Ok(m);
        }
        let built = Self::build()?;
        Ok(PAGE_MODEL.get_or_init(|| built))
    }

    pub fn runner(&self) -> Result<Runner<'_>, String> {
        Runner::spliced(TINY_TEXT, &self.model, &self.splice).map_err(|e| e.to_string())
    }
}

/// One machine step as the model generated it, and the machine read back after it.
#[derive(Debug, Clone, PartialEq)]
pub struct SplicedStep {
    pub record: StepRecord,
    /// The tokens the model chose for it: its record, then its VAL tokens.
    pub tokens: Vec<Token>,
    /// Whether the rows were read back after this step (on WebGPU only after the last).
    pub read: bool,
    /// The rows of the warp that ran, lane by lane (registers and PC, decoded).
    pub rows: Vec<RegisterRow>,
    /// The same lanes' registers as the steps so far sent them (a step sends the registers a
    /// later step reads), the interpreter's own registers, and each lane's PC (`EXITED` once it
    /// has exited).
    pub sent: Vec<Vec<u32>>,
    pub interpreter: Vec<Vec<u32>>,
    pub pcs: Vec<u32>,
    /// Global memory read back from a load mixer's rows, and the interpreter's.
    pub memory: Vec<Option<u32>>,
    pub global: Vec<u32>,
}

impl SplicedStep {
    /// Whether every decoded value is the one the steps sent and the interpreter holds (and
    /// the rows were read at all).
    pub fn agrees(&self) -> bool {
        if !self.read {
            return false;
        }
        let sent = self.sent.iter().map(|r| r.iter().map(|&v| Some(v)).collect::<Vec<_>>());
        self.rows.iter().zip(sent).all(|(row, s)| row.values == s)
            && self.rows.iter().zip(&self.pcs).all(|(row, &pc)| row.pc == Some(pc))
            && self.memory.iter().zip(&self.global).all(|(m, &g)| *m == Some(g))
    }
}

/// A launch in the spliced model: its counts, every step, and its time.
#[derive(Debug, Clone, PartialEq)]
pub struct SplicedRun {
    pub sizes: Sizes,
    pub launched: Launched,
    pub steps: Vec<SplicedStep>,
    pub arrays_equal: bool,
    /// The launch's milliseconds, the reading back of rows between steps left out.
    pub ms: f64,
    /// The WebGPU adapter it ran on (`None`: wasm).
    pub on: Option<String>,
}

impl SplicedRun {
    pub fn per_s(&self, count: u64) -> f64 {
        count as f64 / (self.ms / 1e3).max(1e-9)
    }
}

/// The view of a launch, built from the tokens as they come: an interpreter stepped at each
/// step's last token (the launch checks every token against its own; this one gives the
/// registers the panel shows) and the steps so far.
pub(crate) struct Viewer {
    m: Machine,
    file: SentRegisters,
    tokens: Vec<Token>,
    steps: Vec<SplicedStep>,
    error: Option<String>,
}

impl Viewer {
    /// Takes a token fed to the model; at a step's end records the step with the rows `rows`
    /// reads back (`Ok(None)`: not read at this step; an error stops the launch).
    pub(crate) fn take(
        &mut self,
        f: &Fed,
        rows: impl FnOnce(usize) -> Result<Option<MachineRows>, String>,
    ) -> ControlFlow<()> {
        if f.chosen {
            self.tokens.push(f.token);
        }
        if !f.ends_step || self.error.is_some() {
            return ControlFlow::Continue(());
        }
        let record = match self.m.step() {
            Ok(Some(record)) => record,
            other => {
                self.error = Some(format!("the view's interpreter at step {}: {other:?}", f.steps));
                return ControlFlow::Break(());
            }
        };
        self.file.after(&record, &self.m);
        let w = record.warp;
        let (read, (registers, memory)) = match rows(self.m.global.len()) {
            Ok(Some(r)) => (true, (r.registers.into_iter().filter(|row| row.warp as usize == w).collect(), r.memory)),
            Ok(None) => (false, (Vec::new(), Vec::new())),
            Err(e) => {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
        };
        self.steps.push(SplicedStep {
            record,
            tokens: std::mem::take(&mut self.tokens),
            read,
            rows: registers,
            sent: self.file.regs[w].clone(),
            interpreter: self.m.warps[w].regs.clone(),
            pcs: self.m.warps[w].pcs.iter().map(|pc| pc.map_or(u32::from(EXITED), |pc| pc as u32)).collect(),
            memory,
            global: self.m.global.clone(),
        });
        ControlFlow::Continue(())
    }
}

/// `k` lowered from `ptx` for the second machine, its launch, and a viewer for it.
pub(crate) fn prepare(k: &SuiteKernel, ptx: &str) -> Result<(Kernel, Prepared, Viewer, (usize, usize)), String> {
    let spec = MachineSpec::second();
    let (kernel, p, m) = k.machine(ptx, &spec)?;
    let per_cta = p.launch.block.div_ceil(spec.lanes);
    let warps = (p.launch.grid * per_cta, per_cta);
    let viewer = Viewer { file: SentRegisters::new(&m), m, tokens: Vec::new(), steps: Vec::new(), error: None };
    Ok((kernel, p, viewer, warps))
}

/// The run's outcome: the viewer's error first (it stopped the launch), then the launch's.
pub(crate) fn finish<E: std::fmt::Display>(
    (k, p): (&SuiteKernel, &Prepared),
    splice: &Splice,
    viewer: Viewer,
    launched: Result<Launched, E>,
    (ms, on): (f64, Option<String>),
) -> Result<SplicedRun, String> {
    if let Some(e) = viewer.error {
        return Err(e);
    }
    let launched = launched.map_err(|e| format!("{}: {e}", k.name))?;
    Ok(SplicedRun {
        sizes: splice.sizes(),
        arrays_equal: p.read_arrays(&launched.global) == k.expected(p),
        launched,
        steps: viewer.steps,
        ms,
        on,
    })
}

/// Launches `ptx` with `k`'s launch and inputs inside `runner` (spliced with `model`'s splice);
/// `now` is a millisecond clock. After every step the machine is read back out of the rows.
pub fn spliced_run(
    model: &SplicedModel,
    runner: &mut Runner,
    k: &SuiteKernel,
    ptx: &str,
    mut now: impl FnMut() -> f64,
) -> Result<SplicedRun, String> {
    let spec = MachineSpec::second();
    let (kernel, p, mut viewer, warps) = prepare(k, ptx)?;
    let splice = &model.splice;
    let mut reading = 0.0;
    let start = now();
    let launched =
        launch_observed(runner, splice, (spec, &kernel.program), &p.memory, &p.launch, MAX_STEPS as u64, |f, r| {
            let t = now();
            let not_spliced = || "the runner is not spliced".to_string();
            let flow = viewer
                .take(&f, |words| splice.machine_rows(r, warps, spec.regs, words).map(Some).ok_or_else(not_spliced));
            reading += now() - t;
            flow
        });
    let ms = now() - start - reading;
    finish((k, &p), splice, viewer, launched, (ms, None))
}

/// A token as the panel writes it.
pub fn token_text(t: &Token) -> String {
    match *t {
        Token::Val(v) => format!("VAL {v}"),
        Token::Record { warp, block, mask } => format!("record: warp {warp}, block {block}, lanes {}", lanes(mask, 4)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_wasm::qwengpu::suite::kernels;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A kernel with shuffles and divergence, launched in the spliced model: its arrays are the
    /// plain Rust version's, and after every step the rows read back are the machine the
    /// interpreter has (a register the step sent, every PC, memory).
    #[test]
    fn every_step_reads_back_the_interpreters_machine() {
        let model = SplicedModel::build().unwrap();
        let mut runner = model.runner().unwrap();
        let k = kernels().into_iter().find(|k| k.name == "warp_broadcast").unwrap();
        let mut clock = 0.0;
        let r = spliced_run(&model, &mut runner, &k, k.ptx, || {
            clock += 1.0;
            clock
        })
        .unwrap();
        assert!(r.arrays_equal);
        assert_eq!(r.steps.len() as u64, r.launched.steps);
        assert!(r.steps.iter().all(SplicedStep::agrees));
        // The model chose every token after the prompt: each step's record and VAL tokens, and
        // the end record (the one token no step holds).
        let chosen: usize = r.steps.iter().map(|s| s.tokens.len()).sum();
        assert_eq!(chosen as u64 + 1, r.launched.chosen);
        assert!(r.steps.iter().all(|s| s.tokens[0]
            == Token::Record { warp: s.record.warp as u32, block: s.record.block as u32, mask: s.record.mask }));
        // A step where a register differs from the interpreter's but was never sent: the view
        // tells them apart (the sent copy is what the rows must hold).
        assert!(r.steps.iter().any(|s| s.sent != s.interpreter));
        // Edited PTX the machine cannot run is refused, naming the line.
        let err = spliced_run(&model, &mut runner, &k, &k.ptx.replacen("add.s32", "add.f32", 1), || 0.0).unwrap_err();
        assert!(err.contains("PTX line"), "{err}");
    }
}
