use super::drift::{self, kl};
use super::*;
use crate::bitnet::model::sample::greedy as argmax;
use crate::bitnet::random::Rng;
use crate::qwen3::model::Model;
use crate::qwen3::reference::Reference;
use crate::qwengpu::deltanet::DeltaNet;
use crate::qwengpu::exec::load::{memory_words, shared_words};
use crate::qwengpu::limb_memory::Layout;
use crate::qwengpu::register_file::tests::{follow, Checked, Fed};
use crate::qwengpu::register_file::{RegisterFile, RESET};
use crate::qwengpu::suite;
use alloc::format;
use core::ops::ControlFlow;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// The tiny llama that can be spliced, and its random weights.
pub(crate) fn llama() -> (Config, FloatModel) {
    let c = TINY_TEXT;
    (c, Model::random_float(c, 3))
}

/// Launches the suite kernels `names` one after another in `runner`'s context, each checked
/// against its plain Rust arrays.
pub(crate) fn launch_all(runner: &mut Runner, splice: &Splice, names: &[&str]) {
    let spec = MachineSpec::second();
    for &name in names {
        let k = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        let out = super::launch::launch(runner, splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| {
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.read_arrays(&out.global), k.expected(&p), "{name}");
    }
}

fn tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<usize> {
    (0..n).map(|_| (rng.next_u64() % vocab as u64) as usize).collect()
}

/// The runner's plain model is the reference's (an independent plain forward pass, itself
/// checked against candle): the same logits up to summation order, the same argmax, on all
/// three architectures.
#[test]
fn the_plain_runner_is_the_reference() {
    for (name, c) in Config::TINY_FAMILY {
        let model = Model::random_float(c, 11);
        let mut reference = Reference::new(c, &model);
        let mut runner = Runner::plain(c, &model).unwrap();
        for (pos, t) in tokens(&mut Rng::new(1), 12, c.vocab).into_iter().enumerate() {
            let (want, got) = (reference.forward(t), runner.forward(t).unwrap());
            let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-4, "{name}, position {pos}: |Δlogit| up to {worst}");
            assert_eq!(argmax(&want), argmax(&got), "{name}, position {pos}");
        }
    }
}

/// At text positions the spliced model's text logits are the plain model's bit for bit, every
/// machine logit is at most −KIND, so the drift is exactly 0 and greedy decoding agrees.
#[test]
fn text_positions_are_untouched_by_the_splice() {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let (mut plain, mut spliced) = (Runner::plain(c, &model).unwrap(), Runner::spliced(c, &model, &splice).unwrap());
    let mut rng = Rng::new(2);
    for t in tokens(&mut rng, 40, c.vocab) {
        let (p, s) = (plain.forward(t).unwrap(), spliced.forward(t).unwrap());
        assert_eq!(s.len(), c.vocab + splice.vocab.len());
        assert!(p.iter().zip(&s).all(|(a, b)| a.to_bits() == b.to_bits()), "token {t}");
        // About −2^60/rms: exp of it beside any text logit is exactly 0.
        assert!(s[c.vocab..].iter().all(|&l| l < -1e15), "token {t}");
        assert_eq!(kl(&p, &s), 0.0);
    }
    let passages: Vec<Vec<usize>> = (0..3).map(|_| tokens(&mut rng, 30, c.vocab)).collect();
    let prompts: Vec<Vec<usize>> = (0..2).map(|_| tokens(&mut rng, 5, c.vocab)).collect();
    let d = drift::measure(&mut plain, &mut spliced, &passages, &prompts, 8, &mut |_, _| {}).unwrap();
    assert_eq!((d.positions, d.mean_kl, d.max_kl, d.greedy_identical), (87, 0.0, 0.0, 2));
}

/// The argument is needed: with the text's own ε on the widened stream (instead of ε/4), the
/// text logits move.
#[test]
fn without_the_scaled_epsilon_the_text_drifts() {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut norms = splice.norms(&model);
    norms.eps = c.rms_eps as f32;
    let (mut plain, mut spliced) =
        (Runner::plain(c, &model).unwrap(), Runner::spliced_with(c, &model, &splice, norms).unwrap());
    let moved = tokens(&mut Rng::new(4), 20, c.vocab)
        .into_iter()
        .filter(|&t| {
            let (p, s) = (plain.forward(t).unwrap(), spliced.forward(t).unwrap());
            kl(&p, &s) > 0.0
        })
        .count();
    assert!(moved > 10, "only {moved} of 20 positions moved");
}

/// The flag is needed: with the final norm's weight on it zeroed, every machine token scores 0
/// at text positions and takes probability from the text.
#[test]
fn without_the_text_flag_machine_tokens_take_mass() {
    let (c, mut model) = llama();
    // Trained models' logits are within tens of 0; these random ones are not, so the text's
    // final norm is scaled down (the splice argument holds for any weights).
    model.final_norm.iter_mut().for_each(|w| *w /= 64.0);
    let splice = Splice::new(c).unwrap();
    let mut norms = splice.norms(&model);
    norms.last[splice.flag] = 0.0;
    let (mut plain, mut spliced) =
        (Runner::plain(c, &model).unwrap(), Runner::spliced_with(c, &model, &splice, norms).unwrap());
    for t in tokens(&mut Rng::new(6), 5, c.vocab) {
        let (p, s) = (plain.forward(t).unwrap(), spliced.forward(t).unwrap());
        assert!(s[c.vocab..].iter().all(|&l| l == 0.0));
        assert!(kl(&p, &s) > 1e-3, "{}", kl(&p, &s));
    }
}

/// At a machine position (after text) the model's own argmax over the whole vocabulary is the
/// token its channels name, with the runner-up exactly 1 below (the final norm stayed exact over
/// the text layers' output and the 63 compiled layers'), VAL tokens with and without an image
/// record before them (an executed step's positions name its next token instead, which the
/// kernels' tests check).
#[test]
fn machine_positions_name_their_token() {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut spliced = Runner::spliced(c, &model, &splice).unwrap();
    let mut rng = Rng::new(7);
    for t in tokens(&mut rng, 10, c.vocab) {
        spliced.forward(t).unwrap();
    }
    let mut vals = vec![0u16, 1, 0xff, 0x100, 0xffff, 0x8000, 0x1234];
    vals.extend((0..6).map(|_| rng.next_u64() as u16));
    for (i, v) in vals.into_iter().enumerate() {
        if i == 7 {
            spliced.forward(splice.token_id(Token::Record { warp: 1, block: 2, mask: 0 })).unwrap();
        }
        let id = splice.token_id(Token::Val(v));
        let logits = spliced.forward(id).unwrap();
        let best = argmax(&logits) as usize;
        assert_eq!(best, id, "VAL {v:#x}");
        let mut rest = logits.clone();
        rest[id] = f32::MIN;
        assert_eq!(logits[id] - rest[argmax(&rest) as usize], 1.0, "VAL {v:#x}");
    }
    let record = Token::Record { warp: 3, block: 17, mask: 0 };
    let logits = spliced.forward(splice.token_id(record)).unwrap();
    assert_eq!(splice.machine_token(argmax(&logits) as usize), Some(record));
}

/// The slot counter inside the spliced model: after each record token, the VAL tokens that
/// follow get slots 1, 2, … (one-hot in the stream) and see the step's record, text between
/// them moves nothing, and past the last slot none is set.
#[test]
fn val_tokens_know_their_slot_in_the_step() {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut spliced = Runner::spliced(c, &model, &splice).unwrap();
    let mut rng = Rng::new(12);
    let mut since: Option<usize> = None;
    let mut steps = vec![5usize, 0, 33, 12];
    steps.extend((0..4).map(|_| (rng.next_u64() % 20) as usize));
    let slots = |x: &[f32]| x[splice.slot..splice.slot + splice.slots].to_vec();
    let val = splice.token_id(Token::Val(7));
    spliced.forward(val).unwrap();
    assert!(slots(&spliced.machine_stream).iter().all(|&v| v == 0.0), "a slot before any record");
    for (i, n) in steps.into_iter().enumerate() {
        let record = splice.token_id(Token::Record { warp: i as u32, block: 1, mask: 15 });
        let mut seq = vec![record];
        seq.extend((0..n).map(|k| if k % 5 == 4 { (rng.next_u64() % c.vocab as u64) as usize } else { val }));
        for t in seq {
            spliced.forward(t).unwrap();
            since = match t {
                t if t == record => Some(0),
                t if t == val => since.map(|j| j + 1),
                _ => since,
            };
            if t < c.vocab {
                continue;
            }
            let want: Vec<f32> = (0..splice.slots).map(|s| f32::from(u8::from(since == Some(s)))).collect();
            assert_eq!(slots(&spliced.machine_stream), want, "step {i}: {since:?} VAL tokens since the record");
            let held = &spliced.machine_stream[splice.step_record..splice.step_record + 3];
            assert_eq!(held, [i as f32, 1.0, 15.0], "step {i}: the step's record");
        }
    }
}

/// Bad input is named: a hidden size that is no square, a token past the vocabulary, tensors of
/// the wrong size.
#[test]
fn bad_splices_and_tokens_are_errors() {
    let c = Config { hidden: 200, ..Config::TINY_FAMILY[1].1 };
    assert_eq!(Splice::new(c).err(), Some(SpliceError::Hidden(200)));
    let (c, mut model) = llama();
    let splice = Splice::new(c).unwrap();
    // Decoder layers: two mixers in a row, or a mixer last, are not one.
    let mut swapped = splice.clone();
    swapped.layers.swap(1, 2);
    let mut last = splice.clone();
    // The PC rows' mixer, with the three MLPs after it gone.
    last.layers.truncate(splice.layers.len() - 3);
    for (bad, at) in [(swapped, 0), (last, splice.layers.len() - 4)] {
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains(&format!("layer {at}: a Gated DeltaNet with no SwiGLU")), "{e}");
    }
    let mut spliced = Runner::spliced(c, &model, &splice).unwrap();
    let past = splice.vocab_size();
    assert_eq!(spliced.forward(past).err(), Some(SpliceError::Token { token: past, vocab: past }));
    let mut plain = Runner::plain(c, &model).unwrap();
    assert_eq!(plain.forward(c.vocab).err(), Some(SpliceError::Token { token: c.vocab, vocab: c.vocab }));
    model.layers[1].down.pop();
    let e = Runner::plain(c, &model).err().unwrap();
    assert!(e.to_string().contains("ffn_down") || e.to_string().contains("down"), "{e}");
}

/// The spliced model fed machine tokens through its own embedding, as [`Fed`] needs.
struct SplicedRun<'a> {
    splice: &'a Splice,
    runner: Runner<'a>,
    /// The compiled layer that holds the register rows.
    file: usize,
    /// The first load mixer and its layout, then the first shared mixer and its.
    memory: (usize, Layout),
    shared: (usize, Layout),
    /// The PC rows' layer.
    pcs: usize,
    /// The last position's logits.
    logits: Vec<f32>,
    /// Whether the reset record is fed (a test leaves it out).
    reset: bool,
}

impl Fed for SplicedRun<'_> {
    fn token(&mut self, t: Token, _: Option<[usize; 4]>, _: &mut Rng) -> Option<f32> {
        if t == RESET && !self.reset {
            return None;
        }
        self.logits = self.runner.forward(self.splice.token_id(t)).unwrap();
        None
    }

    fn text(&mut self, rng: &mut Rng) {
        let before = self.runner.deltanet(self.file).map(|n| n.state.clone());
        self.runner.forward((rng.next_u64() % self.splice.text.vocab as u64) as usize).unwrap();
        assert!(self.runner.deltanet(self.file).map(|n| n.state.clone()) == before, "a text token wrote the file");
    }

    fn file(&self) -> (&RegisterFile, &DeltaNet) {
        (&self.splice.registers, self.runner.deltanet(self.file).unwrap())
    }

    fn stream(&self) -> &[f32] {
        &self.runner.machine_stream
    }

    fn executes(&self) -> bool {
        true
    }

    fn predicted(&self) -> Option<Token> {
        self.splice.machine_token(argmax(&self.logits) as usize)
    }

    fn memory(&self, words: usize) -> Option<Vec<u32>> {
        memory_words(self.runner.deltanet(self.memory.0)?, &self.memory.1, words)
    }

    fn shared(&self, cta: usize) -> Option<Vec<u32>> {
        shared_words(self.runner.deltanet(self.shared.0)?, &self.shared.1, cta)
    }

    fn pcs(&self, warps: usize, per_cta: usize) -> Option<Vec<Vec<u8>>> {
        let (rows, net) = (&self.splice.pcs, self.runner.deltanet(self.pcs)?);
        (0..warps).map(|w| (0..rows.registers.shape.lanes).map(|l| rows.pc_of(net, per_cta, w, l)).collect()).collect()
    }
}

/// How [`run_kernels`] feeds its kernels.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    /// Each kernel in a model of its own.
    Fresh,
    /// All of them one after the other in one context, each prompt starting with the reset
    /// record; `reset: false` leaves that record out (the rows keep the earlier launch's).
    One { reset: bool },
}

/// Inside the spliced model, a kernel's program image and steps, fed as tokens through the
/// model's own embedding with text between them, leave in its register rows what the
/// interpreter's registers hold whenever a step reads them, every position of a step reads its
/// block's instructions from the ROM rows, where a lane's values begin the executor has run the
/// block on that lane's registers (each one it writes is the interpreter's after the step), and
/// at every position of a step whose block it computes, the model's own argmax is the step's
/// next VAL token (`register_file`'s check, `follow`). gcd's loop reads registers its block
/// writes back, so it fails if the results row is written past a lane's start. Each kernel's
/// checks, in order.
fn run_kernels(names: &[&str], max_steps: usize, context: Context) -> Vec<(&'static str, Checked)> {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let RowLayers { file, memory, pcs } = splice.row_layers();
    let (layout, loaded) = splice.exec.load_layout();
    // Instruction 0's shared mixer: the next that writes a loaded word after its load mixer.
    let writes =
        |i: usize| matches!(&splice.layers[i], Compiled::DeltaNet(w) if w.w_out.nonzero_rows().contains(&loaded));
    let shared = ((memory + 1..splice.layers.len()).find(|&i| writes(i)).unwrap(), splice.exec.shared_layout());
    let memory = (memory, layout);
    let mut rng = Rng::new(4);
    let new_run = || SplicedRun {
        splice: &splice,
        runner: Runner::spliced(c, &model, &splice).unwrap(),
        file,
        memory: memory.clone(),
        shared: shared.clone(),
        pcs,
        logits: Vec::new(),
        reset: context != Context::One { reset: false },
    };
    let mut run = new_run();
    let mut all = Vec::new();
    for k in suite::kernels().iter().filter(|k| names.is_empty() || names.contains(&k.name)) {
        if context == Context::Fresh {
            run = new_run();
        }
        all.push((k.name, follow(&mut run, k, true, max_steps, &mut rng)));
    }
    all
}

/// The kernels' checks added up, each kernel's asserted exact.
fn exact(all: Vec<(&str, Checked)>) -> Checked {
    let mut total = Checked::default();
    for (name, checked) in all {
        assert!(checked.wrong + checked.memory_wrong == 0, "{name}: {checked:?}");
        total.reads += checked.reads;
        total.loads += checked.loads;
        total.nonzero += checked.nonzero;
        total.executed += checked.executed;
        total.predicted += checked.predicted;
        total.memory_checks += checked.memory_checks;
        total.stored += checked.stored;
        total.pcs += checked.pcs;
        total.records += checked.records;
        total.predicted_stores += checked.predicted_stores;
    }
    total
}

#[test]
fn the_spliced_model_runs_a_kernels_blocks() {
    // The same kernels natively and in Chromium (29 s there on 2026-12-07, since the packed
    // layers; before, only warp_broadcast fitted the time a browser test was given).
    let (names, at_least): (&[&str], usize) =
        (&["warp_broadcast", "gcd", "is_prime", "count_if", "shfl_edges", "transpose", "block_sums"], 80);
    // gcd's and is_prime's first 120 steps: their divisions' loops (§15) and gcd's own;
    // count_if's atomics (§16), each lane's read after the lane before it wrote; transpose's and
    // block_sums' barriers, and block_sums' four thread blocks (the next record after a barrier,
    // a warp's exit and a thread block's end).
    let c = exact(run_kernels(names, 120, Context::Fresh));
    assert!(c.nonzero > 10 && c.executed > at_least / 2 && c.predicted > at_least, "{c:?}");
    assert!(c.predicted_stores > 2 && c.memory_checks > at_least / 4, "{c:?}");
    // After every step each lane's PC row is the interpreter's lane's PC, and the model's argmax
    // names the next record.
    assert!(c.pcs > at_least / 2 && c.records > at_least / 2, "{c:?}");
}

/// Launches one after the other in one context: each prompt's reset record clears the program
/// image, the registers and the shared rows, so the second kernel runs as in a fresh model.
/// Without that record the second kernel reads what the first left (reverse's shared words,
/// its registers) and goes wrong.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn kernels_run_one_after_the_other_in_one_context() {
    let names = ["reverse", "count_if"];
    let c = exact(run_kernels(&names, 60, Context::One { reset: true }));
    assert!(c.predicted > 100 && c.memory_checks > 20, "{c:?}");
    // `follow` stops at the first token the model gets wrong; that must be in count_if.
    let without = std::panic::catch_unwind(|| exact(run_kernels(&names, 60, Context::One { reset: false })));
    let why = without.err().and_then(|e| e.downcast::<String>().ok()).map(|s| *s).unwrap_or_default();
    assert!(why.contains(": count_if: step "), "without the reset record: {why:?}");
}

/// The same through all 49 suite kernels, natively and in Chromium, in eight parts (kernel `i`
/// in part `i mod 8`): a test in Chromium holds the page's one thread, and ChromeDriver gives up
/// on a renderer silent for 300 s. `cargo xtask test --only spliced-suite` runs them all (the
/// whole suite in one thread took 264 s in release on 2026-12-07).
fn the_spliced_model_runs_suite_part(part: usize) {
    let names: Vec<&str> =
        suite::kernels().iter().enumerate().filter(|(i, _)| i % 8 == part).map(|(_, k)| k.name).collect();
    let c = exact(run_kernels(&names, usize::MAX, Context::Fresh));
    // Each kernel's first record and its end, at least, named by the model.
    assert!(c.records >= 2 * names.len() && c.predicted > c.records, "{c:?}");
}

/// Hands the page's one thread back to the browser for a 0 ms timer: tests that run back to back
/// without a break leave ChromeDriver's polls of the page unanswered, and past 300 s it gives up.
#[cfg(target_arch = "wasm32")]
async fn yield_to_the_browser() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let global = js_sys::global();
        if let Ok(set_timeout) = js_sys::Reflect::get(&global, &"setTimeout".into()) {
            let _ = js_sys::Function::from(set_timeout).call2(&global, &resolve, &0.into());
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

macro_rules! suite_parts {
    ($($name:ident = $part:expr),*) => {$(
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        #[ignore = "the whole suite, minutes: cargo xtask test --only spliced-suite"]
        fn $name() {
            the_spliced_model_runs_suite_part($part);
        }

        #[cfg(target_arch = "wasm32")]
        #[test]
        #[ignore = "the whole suite, minutes: cargo xtask test --only spliced-suite"]
        async fn $name() {
            yield_to_the_browser().await;
            the_spliced_model_runs_suite_part($part);
        }
    )*};
}

suite_parts!(
    the_spliced_model_runs_the_suite_0 = 0,
    the_spliced_model_runs_the_suite_1 = 1,
    the_spliced_model_runs_the_suite_2 = 2,
    the_spliced_model_runs_the_suite_3 = 3,
    the_spliced_model_runs_the_suite_4 = 4,
    the_spliced_model_runs_the_suite_5 = 5,
    the_spliced_model_runs_the_suite_6 = 6,
    the_spliced_model_runs_the_suite_7 = 7
);

/// Kernels launched inside the spliced model, one after another in one context with text
/// between them: after the prompt the model's argmax chooses every token (each record, checked
/// against the interpreter's, every VAL token and the launch's end), and the arrays those
/// tokens carry are the kernel's plain Rust reference's (`suite`'s, written apart from the
/// machine).
#[test]
fn launched_kernels_give_their_plain_arrays() {
    use super::launch::launch;
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    let spec = MachineSpec::second();
    let names: &[&str] = if cfg!(target_arch = "wasm32") { &["warp_broadcast"] } else { &["reverse", "warp_scan"] };
    let mut rng = Rng::new(5);
    for k in suite::kernels().iter().filter(|k| names.contains(&k.name)) {
        runner.forward_many(&tokens(&mut rng, 3, c.vocab)).unwrap();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        let mut seen = 0;
        let out = launch(&mut runner, &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |f| {
            seen = f.steps;
            ControlFlow::Continue(())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(p.read_arrays(&out.global), k.expected(&p), "{}", k.name);
        // After the prompt the model chose every token: the records, the VAL tokens and the end.
        assert!(seen == out.steps && out.chosen > 50 && out.tokens == out.prompt + out.chosen, "{}: {out:?}", k.name);
    }
    assert!(names.len() < 2 || runner.position() > 1000);
}

/// A model that cannot name the next token (its output layer emptied) is stopped at the first
/// one, the launch's first record, which the error names.
#[test]
fn a_launch_stops_where_the_model_diverges() {
    use super::launch::{launch, LaunchError};
    let (c, model) = llama();
    let mut splice = Splice::new(c).unwrap();
    if let Some(Compiled::SwiGlu(output)) = splice.layers.last_mut() {
        output.units.clear();
    }
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    let spec = MachineSpec::second();
    let k = suite::kernels().into_iter().find(|k| k.name == "reverse").unwrap();
    let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
    let e = launch(&mut runner, &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| {
        ControlFlow::Continue(())
    })
    .unwrap_err();
    assert!(matches!(e, LaunchError::Diverged { step: 0, token: 0, .. }), "{e}");
    assert!(e.to_string().starts_with("step 0 (warp 0, block 0), token 0: the model chose"), "{e}");
}

/// A chunk of positions at once gives the bits of one position at a time, whichever logits are
/// asked for: every position's (`forward_many`) or the last one's (`forward_last`). The chunk is
/// a kernel's prompt between text tokens, so the machine's layers (their units scheduled by the
/// channels that are hot, `awake`) do real work.
#[test]
fn chunks_give_the_bits_of_single_positions() {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let spec = MachineSpec::second();
    let k = suite::kernels().into_iter().find(|k| k.name == "reverse").unwrap();
    let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
    let rf = &splice.registers;
    let prompt = rf.prompt_tokens(&kernel.program, &p.launch, &p.memory).unwrap();
    let mut rng = Rng::new(9);
    let ids: Vec<usize> = tokens(&mut rng, 3, c.vocab)
        .into_iter()
        .chain(prompt.into_iter().map(|t| splice.token_id(t)))
        .take(80)
        .collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut one = Runner::spliced(c, &model, &splice).unwrap();
    let single: Vec<Vec<u32>> = ids.iter().map(|&t| bits(&one.forward(t).unwrap())).collect();
    let mut many = Runner::spliced(c, &model, &splice).unwrap();
    let chunked: Vec<Vec<u32>> =
        ids.chunks(32).flat_map(|ch| many.forward_many(ch).unwrap()).map(|l| bits(&l)).collect();
    assert!(single == chunked, "forward_many differs from forward");
    let mut last = Runner::spliced(c, &model, &splice).unwrap();
    let tail: Vec<Vec<u32>> = ids.chunks(32).map(|ch| bits(&last.forward_last(ch).unwrap())).collect();
    let want: Vec<Vec<u32>> = ids
        .chunks(32)
        .scan(0, |at, ch| {
            *at += ch.len();
            Some(single[*at - 1].clone())
        })
        .collect();
    assert!(tail == want, "forward_last differs from forward");
    assert_eq!(bits(&last.machine_stream), bits(&one.machine_stream));
}
