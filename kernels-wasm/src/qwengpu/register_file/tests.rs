use super::*;
use crate::bitnet::random::Rng;
use crate::qwengpu::carry::uses_defs;
use crate::qwengpu::deltanet::DeltaNet;
use crate::qwengpu::exec;
use crate::qwengpu::exec::load::{memory_words, shared_words, LoadChannels};
use crate::qwengpu::interp::{Launch, Machine};
use crate::qwengpu::isa::Inst;
use crate::qwengpu::limbs::{norm_weights, rms_norm};
use crate::qwengpu::machine_tokens::Vocab;
use crate::qwengpu::program_image::{decode, normal};
use crate::qwengpu::slot_counter::Counter;
use crate::qwengpu::splice::launch::record_token;
use crate::qwengpu::suite;
use alloc::format;
use alloc::string::String;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// The stream: bias 0, the vocabulary's fields 1–6, the counter 7–43, the register file from
/// 44; a text position's own channels from [`TEXT`].
const D: usize = 1024;
const TEXT: usize = 1000;

/// The machine's four layers after the embedding, run position by position.
struct Stack {
    vocab: Vocab,
    rf: RegisterFile,
    counter: DeltaNet,
    decode: Layer,
    image: DeltaNet,
    address: Layer,
    file: DeltaNet,
    /// A store's word index held for its halves, their memory groups, and global memory's rows
    /// (a load mixer of the executor's that never reads).
    latch: DeltaNet,
    stores: Layer,
    memory: DeltaNet,
    memory_layout: Layout,
    /// Shared memory's rows (a shared mixer of the executor's that never reads).
    shared: DeltaNet,
    shared_layout: Layout,
    order: Vec<usize>,
    /// The stream after the stack at the last position.
    last: Vec<f32>,
}

impl Stack {
    fn new(spec: &MachineSpec) -> Stack {
        let vocab = Vocab::at(1);
        let shape = Shape::of(spec);
        let (slot, slots) = (8, shape.slots + 1);
        let record = slot + slots;
        let c = Counter { d_model: D, one: 0, kind: 1, count: 7, slot, slots, record_in: [4, 5, 6], record };
        let rf = RegisterFile { shape, d_model: D, one: 0, kind: 1, val: [2, 3], record, slot, first: record + 3 };
        assert!(rf.first + rf.len() <= TEXT, "{} channels", rf.len());
        assert_eq!(rf.shape.slots + 1, c.slots);
        let mut decode = c.decode();
        decode.units.extend(rf.decode().units);
        let (image, address, file) = (DeltaNet::new(rf.image()), rf.address(), DeltaNet::new(rf.file()));
        // The mixer's read flag and channels lie past the register file's, where nothing is set.
        let unused = rf.first + rf.len();
        let load = LoadChannels { address: unused + 1, first: unused + 5 };
        assert!(load.used().end <= TEXT);
        let memory_layout = load.layout(D, 0, rf.memory(), rf.val, unused);
        let shared_layout = load.shared_layout(D, 0, (rf.shared(), shared_groups(&rf.shape)), rf.val, unused);
        Stack {
            shared: DeltaNet::new(limb_memory::weights(&shared_layout)),
            shared_layout,
            latch: DeltaNet::new(rf.store_latch()),
            stores: rf.store_units(),
            memory: DeltaNet::new(limb_memory::weights(&memory_layout)),
            memory_layout,
            vocab,
            rf,
            counter: c.layer(),
            decode,
            image,
            address,
            file,
            order: (0..D).rev().collect(),
            last: Vec::new(),
        }
    }

    /// One position: the token's embedding (or a text position's own channels) and a probe of
    /// the register file at `(warp, lane, half, reg)`; returns the stream after the stack.
    fn forward(&mut self, token: Option<Token>, probe: Option<[usize; 4]>, rng: &mut Rng) -> Vec<f32> {
        let mut x = vec![0.0; D];
        match token {
            Some(t) => self.vocab.embedding(D, t).into_iter().for_each(|(c, v)| x[c] = v),
            None => (TEXT..D).for_each(|c| x[c] = (rng.next_u64() % 2001) as f32 / 100.0 - 10.0),
        }
        if let Some([warp, lane, half, reg]) = probe {
            let [w, lh, r, on] = self.rf.probe();
            for c in [w + warp, lh + 2 * lane + half, r + reg, on] {
                x[c] = 1.0;
            }
        }
        let w = norm_weights(D);
        let mix = |net: &mut DeltaNet, x: &mut Vec<f32>| {
            let y = net.step(&rms_norm(x, &w, 1e-6, &self.order));
            x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
        };
        mix(&mut self.counter, &mut x);
        self.decode.forward(&mut x, 1e-6, &self.order);
        mix(&mut self.image, &mut x);
        self.address.forward(&mut x, 1e-6, &self.order);
        mix(&mut self.file, &mut x);
        mix(&mut self.latch, &mut x);
        self.stores.forward(&mut x, 1e-6, &self.order);
        mix(&mut self.memory, &mut x);
        mix(&mut self.shared, &mut x);
        x
    }

    /// The probe's read: the two limbs as a 16-bit half.
    fn read(&self, x: &[f32]) -> f32 {
        x[self.rf.read()] + 256.0 * x[self.rf.read() + 1]
    }
}

/// A model that takes machine tokens: the stack here, or a spliced text model (`splice`).
pub(crate) trait Fed {
    /// One machine position, with a probe of the register file at `(warp, lane, half, reg)`
    /// where the model can take one; returns the probe's read (a 16-bit half).
    fn token(&mut self, t: Token, probe: Option<[usize; 4]>, rng: &mut Rng) -> Option<f32>;
    /// A text position; it must move no machine state.
    fn text(&mut self, rng: &mut Rng);
    /// The register file's layout and its state now.
    fn file(&self) -> (&RegisterFile, &DeltaNet);
    /// The stream after the machine's layers at the last position.
    fn stream(&self) -> &[f32];
    /// Whether the model runs the block on the registers it loads (`exec`), so that a lane's
    /// registers in the stream are those after the step.
    fn executes(&self) -> bool {
        false
    }
    /// The machine token the model's own argmax picks at the last position, where it has a head.
    fn predicted(&self) -> Option<Token> {
        None
    }
    /// Global memory's first `words` words as the model's memory rows hold them.
    fn memory(&self, words: usize) -> Option<Vec<u32>>;
    /// Thread block `cta`'s shared memory as the model's rows hold it.
    fn shared(&self, cta: usize) -> Option<Vec<u32>>;
    /// Every lane's PC in the PC rows (`pcs[warp][lane]`, thread blocks of `per_cta` warps), if
    /// the model has them.
    fn pcs(&self, _warps: usize, _per_cta: usize) -> Option<Vec<Vec<u8>>> {
        None
    }
}

impl Fed for Stack {
    fn token(&mut self, t: Token, probe: Option<[usize; 4]>, rng: &mut Rng) -> Option<f32> {
        self.last = self.forward(Some(t), probe, rng);
        probe.map(|_| self.read(&self.last))
    }

    fn text(&mut self, rng: &mut Rng) {
        let before = self.file.state.clone();
        let x = self.forward(None, None, rng);
        assert!(x[..TEXT].iter().all(|&v| v == 0.0), "a text position moved a machine channel");
        assert!(self.file.state == before, "a text position wrote the file");
    }

    fn file(&self) -> (&RegisterFile, &DeltaNet) {
        (&self.rf, &self.file)
    }

    fn stream(&self) -> &[f32] {
        &self.last
    }

    fn memory(&self, words: usize) -> Option<Vec<u32>> {
        memory_words(&self.memory, &self.memory_layout, words)
    }

    fn shared(&self, cta: usize) -> Option<Vec<u32>> {
        shared_words(&self.shared, &self.shared_layout, cta)
    }
}

/// The held block's instructions as the ROM heads read them from the stream.
pub(crate) fn rom_block(rf: &RegisterFile, x: &[f32]) -> Vec<Option<Inst>> {
    let words: Vec<u16> =
        (0..rf.shape.rom_words).map(|k| (x[rf.rom() + 3 * k] + 256.0 * x[rf.rom() + 3 * k + 1]) as u16).collect();
    words.chunks(WORDS).map(|w| decode(w).unwrap()).collect()
}

/// What a run checked: register reads compared with the interpreter, how many of them were
/// nonzero, and the first mismatch.
#[derive(Default, Debug)]
pub(crate) struct Checked {
    pub reads: usize,
    /// Registers found in the stream where a lane's values begin.
    pub loads: usize,
    /// Of those, registers the executor wrote (a block it computes, `exec::supports`).
    pub executed: usize,
    /// Positions whose next token (a VAL token of the step) the model's argmax predicted.
    pub predicted: usize,
    /// Steps after which the model's memory rows were compared with the interpreter's.
    pub memory_checks: usize,
    /// Of those, the ones where a word differed.
    pub memory_wrong: usize,
    /// Global stores the steps' tokens carried.
    pub stored: usize,
    /// Steps after which every lane's PC in the PC rows was the interpreter's.
    pub pcs: usize,
    /// Records the model's argmax named (after the prompt and at each step's last position),
    /// each the interpreter's next.
    pub records: usize,
    /// Of the predicted tokens, those of a store's slots (word index, low or high half).
    pub predicted_stores: usize,
    pub nonzero: usize,
    pub wrong: usize,
    pub first_wrong: Option<String>,
}

/// Runs `kernel` on the interpreter and feeds its steps to `model` as tokens (after the program
/// image when `with_table`), text positions between them now and then. Before each step, every
/// register the block reads (before writing it) in each active lane must be in the file as the
/// interpreter holds it; at each record position the read head fetches one of them; at every
/// position of a step the ROM heads give the block's instructions.
/// The kernel's first `max_steps` steps (all of them for `usize::MAX`).
pub(crate) fn follow(
    model: &mut impl Fed,
    kernel: &suite::SuiteKernel,
    with_table: bool,
    max_steps: usize,
    rng: &mut Rng,
) -> Checked {
    let spec = MachineSpec::second();
    let (k, _, mut m): (_, _, Machine) = kernel.machine(kernel.ptx, &spec).unwrap();
    let (sent, uses) = (sent(&k.program), uses_defs(&k.program));
    let feed = |model: &mut _, t: Token, probe, rng: &mut Rng| {
        if rng.next_u64().is_multiple_of(11) {
            Fed::text(model, rng);
        }
        Fed::token(model, t, probe, rng)
    };
    // The model's global memory: what the prompt wrote, then each step's stores (an atomic's
    // write is one) in the order of their tokens, lane by lane.
    let mut model_global = m.global.clone();
    let mut model_shared = vec![vec![0; spec.shared_words]; spec.max_threads / spec.lanes];
    let mut checked = Checked::default();
    if with_table {
        let rf = *model.file().0;
        let prompt =
            rf.prompt_tokens(&k.program, &m.launch, &model_global).unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
        for t in prompt {
            feed(model, t, None, rng);
        }
        // A model with a head names the launch's first record after the prompt.
        if let Some(got) = model.predicted() {
            assert_eq!(got, record_token(m.next_record()), "{}: the first record", kernel.name);
            checked.records += 1;
        }
    }
    while !m.finished() && (m.steps as usize) < max_steps {
        let wi = m.current;
        // The running thread block's shared memory as its store tokens left it is in the model's
        // rows for that block.
        let cta = m.warps[wi].cta;
        if let Some(shared) = model.shared(cta).filter(|_| with_table) {
            checked.memory_checks += 1;
            if shared != model_shared[cta] {
                checked.memory_wrong += 1;
                let at =
                    format!("step {}: shared memory of block {cta}: {shared:?}, not {:?}", m.steps, model_shared[cta]);
                checked.first_wrong.get_or_insert(at);
            }
        }
        assert!(model_shared[cta] == m.shared, "{}: step {}: shared stores in token order", kernel.name, m.steps);
        let (pc, mask) = m.warps[wi].active();
        let reads: Vec<(usize, usize, u32)> = (0..spec.lanes)
            .filter(|l| mask & 1 << l != 0)
            .flat_map(|l| live_regs(uses[pc].0).into_iter().map(move |r| (l, r)))
            .map(|(l, r)| (l, r, m.warps[wi].regs[l][r]))
            .collect();
        for &(l, r, want) in &reads {
            let (rf, file) = model.file();
            let got = rf.value(file, wi, l, r);
            checked.reads += 1;
            checked.nonzero += usize::from(want != 0);
            if got != Some(want) {
                checked.wrong += 1;
                let at = format!("step {}, warp {wi} block {pc} lane {l}: r{r} is {got:?}, not {want}", m.steps);
                checked.first_wrong.get_or_insert(at);
            }
        }
        let probe = (!reads.is_empty()).then(|| reads[(rng.next_u64() % reads.len() as u64) as usize]);
        let before = m.warps[wi].regs.clone();
        let (step, stored) = m.step_stored().unwrap().unwrap();
        let live_out = sent[step.block];
        let tokens = RegisterFile::step_tokens(&step, live_out, &m.warps[step.warp].regs, &stored);
        checked.stored += stored.len();
        let block = &k.program.blocks[step.block];
        // A lane's slots: its registers' halves, then three per store.
        let reg_slots = 2 * live_out.count_ones() as usize;
        let per_lane = reg_slots + 3 * store_slots(block).len();
        for l in 0..spec.lanes {
            for s in stored.iter().filter(|s| s.lane == l) {
                match s.space {
                    Space::Global => model_global[s.word as usize] = s.value,
                    Space::Shared => model_shared[cta][s.word as usize] = s.value,
                }
            }
        }
        let half = (rng.next_u64() % 2) as usize;
        let read = feed(model, tokens[0], probe.map(|(l, r, _)| [wi, l, half, r]), rng);
        if let (Some((l, r, want)), Some(got), true) = (probe, read, with_table) {
            assert_eq!(got, (want >> (16 * half) & 0xffff) as f32, "{}: read of warp {wi} lane {l} r{r}", kernel.name);
        }
        let mut want: Vec<Option<Inst>> = k.program.blocks[step.block].iter().map(|&i| Some(normal(i))).collect();
        want.resize(spec.block_len, None);
        let computed = k.program.blocks[step.block].iter().all(|&i| exec::supports(&normal(i)));
        for (i, &t) in tokens.iter().enumerate() {
            if i > 0 {
                feed(model, t, None, rng);
            }
            // A model with a head names the next VAL token of a block it computes, and at the
            // step's last position the next step's record (or the launch's end).
            let at = || format!("{}: step {}, token {i} (block {})", kernel.name, m.steps, step.block);
            match (model.predicted(), tokens.get(i + 1), computed) {
                (Some(got), Some(&next), true) => {
                    assert_eq!(got, next, "{}: the prediction", at());
                    checked.predicted += 1;
                    checked.predicted_stores += usize::from(i % per_lane >= reg_slots);
                }
                (Some(got), None, _) => {
                    assert_eq!(got, record_token(m.next_record()), "{}: the next record", at());
                    checked.records += 1;
                }
                _ => {}
            }
            if with_table {
                let got = rom_block(model.file().0, model.stream());
                assert_eq!(got, want, "{}: step {}, token {i}: the ROM of block {}", kernel.name, m.steps, step.block);
                // Where the next VAL token starts a lane's values, that lane's registers as the
                // step began are in the stream (each register the block reads).
                if i + 1 < tokens.len() && i % per_lane == 0 {
                    let rank = i / per_lane;
                    let lane = (0..spec.lanes).filter(|l| mask & 1 << l != 0).nth(rank).unwrap();
                    let local = model.file().0.local();
                    let stream = model.stream();
                    let reg = |r: usize| {
                        stream[local + 4 * r..local + 4 * r + 4].iter().rev().fold(0u64, |w, &l| w << 8 | l as u64)
                    };
                    // An executing model has run the block on them: where it computes every
                    // instruction, each register read or written is the interpreter's after the
                    // step; elsewhere, those the block reads and never writes are unchanged.
                    let (read, written) = uses[pc];
                    let computed =
                        model.executes() && k.program.blocks[step.block].iter().all(|&i| exec::supports(&normal(i)));
                    let (regs, values) = match (model.executes(), computed) {
                        (true, true) => (read | written, &m.warps[step.warp].regs[lane]),
                        (true, false) => (read & !written, &before[lane]),
                        (false, _) => (read, &before[lane]),
                    };
                    for r in live_regs(regs) {
                        let at = format!("{}: step {}, token {i}: lane {lane} r{r}", kernel.name, m.steps);
                        assert_eq!(reg(r), u64::from(values[r]), "{at} (block {} computed: {computed})", step.block);
                        checked.loads += 1;
                        checked.executed += usize::from(computed && written & 1 << r != 0);
                    }
                }
            }
        }
        // The memory rows hold what the tokens wrote: the prompt's memory and every store so
        // far, which is the interpreter's memory.
        if let Some(memory) = model.memory(model_global.len()).filter(|_| with_table) {
            checked.memory_checks += 1;
            if memory != model_global {
                checked.memory_wrong += 1;
                let first = (0..memory.len()).find(|&w| memory[w] != model_global[w]).unwrap_or(0);
                let at =
                    format!("step {}: memory word {first} is {}, not {}", m.steps, memory[first], model_global[first]);
                checked.first_wrong.get_or_insert(at);
            }
        }
        assert!(model_global == m.global, "{}: step {}: stores in token order", kernel.name, m.steps);
        // The PC rows hold each lane's PC after the step, as the interpreter's lanes have them.
        let per_cta = m.launch.block.div_ceil(spec.lanes);
        if let Some(pcs) = model.pcs(m.warps.len(), per_cta).filter(|_| with_table) {
            let want: Vec<Vec<u8>> = m
                .warps
                .iter()
                .map(|w| w.pcs.iter().map(|p| p.map_or(crate::qwengpu::sequencer::EXITED, |p| p as u8)).collect())
                .collect();
            assert_eq!(
                pcs, want,
                "{}: step {} (warp {}, block {}): the PC rows",
                kernel.name, m.steps, step.warp, step.block
            );
            checked.pcs += 1;
        }
    }
    checked
}

/// Every suite kernel's steps, fed as tokens after its live-out table: the register rows hold
/// what the interpreter's registers hold whenever a step reads them, and after every step the
/// memory rows hold the interpreter's global memory, the stores' tokens written in (on wasm, a
/// few kernels).
#[test]
fn the_register_rows_follow_the_interpreter_through_the_suite() {
    let mut rng = Rng::new(22);
    let kernels = suite::kernels();
    // On wasm a few kernels, gcd's first divisions only (its whole run is 1,980 steps).
    let few = ["warp_broadcast", "gcd", "clamp3", "nested_loops"];
    let max_steps = if cfg!(target_arch = "wasm32") { 300 } else { usize::MAX };
    let (mut reads, mut nonzero, mut ran, mut loads, mut stored, mut checks) = (0, 0, 0, 0, 0, 0);
    for k in kernels.iter().filter(|k| !cfg!(target_arch = "wasm32") || few.contains(&k.name)) {
        let mut stack = Stack::new(&MachineSpec::second());
        let c = follow(&mut stack, k, true, max_steps, &mut rng);
        assert!(
            c.wrong + c.memory_wrong == 0,
            "{}: {} of {} reads wrong, first {:?}",
            k.name,
            c.wrong,
            c.reads,
            c.first_wrong
        );
        (reads, nonzero, ran, loads) = (reads + c.reads, nonzero + c.nonzero, ran + 1, loads + c.loads);
        (stored, checks) = (stored + c.stored, checks + c.memory_checks);
    }
    assert!(ran >= few.len() && nonzero * 2 > reads, "{ran} kernels, {nonzero} of {reads} reads nonzero");
    assert!(loads * 4 > reads, "{loads} registers loaded");
    assert!(checks > 100 && stored > 20, "{checks} memory checks, {stored} stores carried");
}

/// Without the units that give a store's halves their memory groups, the stores never reach
/// the memory rows: the memory check above can fail.
#[test]
fn without_the_store_groups_memory_keeps_the_prompts_words() {
    let mut rng = Rng::new(6);
    let k = suite::kernels().into_iter().find(|k| k.name == "clamp3").unwrap();
    let mut stack = Stack::new(&MachineSpec::second());
    stack.stores = Layer::default();
    let c = follow(&mut stack, &k, true, usize::MAX, &mut rng);
    assert!(c.stored > 0 && c.memory_wrong > 0 && c.wrong == 0, "{c:?}");
}

/// Without the table the VAL tokens go nowhere, and the reads come out wrong: the check above
/// can fail.
#[test]
fn without_the_table_the_registers_are_not_written() {
    let mut rng = Rng::new(5);
    let k = suite::kernels().into_iter().find(|k| k.name == "gcd").unwrap();
    let mut stack = Stack::new(&MachineSpec::second());
    let c = follow(&mut stack, &k, false, 300, &mut rng);
    assert!(c.wrong * 2 > c.reads, "{c:?}");
}

/// The (mask, rank) → lane decode against the rank-th set bit, for every mask and rank.
#[test]
fn the_rank_names_the_active_lane() {
    let stack = Stack::new(&MachineSpec::second());
    let rf = stack.rf;
    for mask in 0..16u32 {
        for hi in 0..8u32 {
            let mut x = vec![0.0; D];
            x[0] = crate::qwengpu::limbs::bias(D);
            (x[rf.record + 2], x[rf.entry() + 1]) = (mask as f32, hi as f32);
            stack.address.forward(&mut x, 1e-6, &stack.order);
            let got: Vec<f32> = x[rf.lane_half()..rf.lane_half() + 8].to_vec();
            let lane = (0..4).filter(|l| mask & 1 << l != 0).nth(hi as usize / 2);
            let want: Vec<f32> = (0..8).map(|i| f32::from(lane.map(|l| 2 * l + hi as usize % 2) == Some(i))).collect();
            assert_eq!(got, want, "mask {mask:04b}, rank {}, half {}", hi / 2, hi % 2);
        }
    }
}

/// A program over the record tokens' blocks, a block with more live-out words than a step has
/// slots, or one longer than its ROM rows, is named.
#[test]
fn tables_that_do_not_fit_are_named() {
    let k = suite::kernels().into_iter().find(|k| k.name == "gcd").unwrap();
    let (kernel, _, m) = k.machine(k.ptx, &MachineSpec::second()).unwrap();
    let rf = Stack::new(&MachineSpec::second()).rf;
    let launch = &m.launch;
    let small = RegisterFile { shape: Shape { blocks: 3, ..rf.shape }, ..rf };
    let e = small.prompt_tokens(&kernel.program, launch, &[]).unwrap_err();
    assert!(matches!(e, ImageTooLarge::Blocks { max: 3, .. }), "{e}");
    let narrow = RegisterFile { shape: Shape { slots: 7, ..rf.shape }, ..rf };
    let e = narrow.prompt_tokens(&kernel.program, launch, &[]).unwrap_err();
    assert!(matches!(e, ImageTooLarge::Slots { max: 7, .. }) && e.to_string().contains("slots"), "{e}");
    let short = RegisterFile { shape: Shape { rom_words: 8, ..rf.shape }, ..rf };
    let e = short.prompt_tokens(&kernel.program, launch, &[]).unwrap_err();
    assert!(matches!(e, ImageTooLarge::Rom { max: 8, .. }), "{e}");
}

/// The launch part: nine parameters, or more warps than the machine has, are named; so is
/// more global memory than the memory rows hold; a page of zeros is left out.
#[test]
fn launches_that_do_not_fit_are_named() {
    let rf = Stack::new(&MachineSpec::second()).rf;
    let e = rf.memory_tokens(&[7; 129]).unwrap_err();
    assert!(matches!(e, ImageTooLarge::Memory { words: 129, max: 128 }), "{e}");
    let mut words = vec![0; 40];
    words[0] = 0x0001_0002;
    words[39] = 0x0003_0000;
    let tokens = rf.memory_tokens(&words).unwrap();
    assert_eq!(tokens.len(), 2 * 33);
    assert_eq!(tokens[..3], [Token::Record { warp: 3, block: 0, mask: 0 }, Token::Val(2), Token::Val(1)]);
    assert_eq!(tokens[33], Token::Record { warp: 3, block: 2, mask: 0 });
    assert_eq!(tokens[33 + 15..33 + 17], [Token::Val(0), Token::Val(3)]);
    assert!(rf.memory_tokens(&[0; 100]).unwrap().is_empty());
    let nine = Launch { grid: 1, block: 4, params: vec![0; 9] };
    let e = rf.launch_tokens(&nine).unwrap_err();
    assert!(matches!(e, ImageTooLarge::Launch { params: 9, .. }) && e.to_string().contains("8 parameters"), "{e}");
    for (grid, block) in [(5, 32), (1, 33), (0, 4), (2, 0)] {
        let e = rf.launch_tokens(&Launch { grid, block, params: vec![] }).unwrap_err();
        assert!(e.to_string().contains(&format!("{grid} × {block} threads")), "{e}");
    }
    let tokens = rf.launch_tokens(&Launch { grid: 2, block: 30, params: vec![0x1234_5678] }).unwrap();
    let want: Vec<Token> = [Token::Record { warp: 2, block: 0, mask: 0 }]
        .into_iter()
        .chain([32, 2, 0x5678, 0x1234].into_iter().chain([0; 14]).map(Token::Val))
        .collect();
    assert_eq!(tokens, want);
}

/// The address layer's first thread index and thread block of every warp of every launch
/// shape, against the interpreter's warps; outside a step (no block size read) both are 0.
#[test]
fn each_warp_knows_its_thread_block_and_first_thread() {
    let spec = MachineSpec::second();
    let stack = Stack::new(&spec);
    let rf = stack.rf;
    let k = suite::kernels().into_iter().find(|k| k.name == "gcd").unwrap();
    let (kernel, _, _) = k.machine(k.ptx, &spec).unwrap();
    let at = |ntid: usize, warp: usize| {
        let mut x = vec![0.0; D];
        x[0] = crate::qwengpu::limbs::bias(D);
        (x[rf.record], x[rf.launch()]) = (warp as f32, ntid as f32);
        stack.address.forward(&mut x, 1e-6, &stack.order);
        (x[rf.thread()], x[rf.thread() + 1])
    };
    let mut warps = 0;
    for ntid in (spec.lanes..=spec.max_block_threads).step_by(spec.lanes) {
        let launch = Launch { grid: spec.max_threads / ntid, block: ntid, params: vec![] };
        let m = Machine::new(spec, kernel.program.clone(), &[], launch).unwrap();
        for (w, warp) in m.warps.iter().enumerate() {
            assert_eq!(at(ntid, w), (warp.first_tid as f32, warp.cta as f32), "warp {w} of blocks of {ntid}");
            warps += 1;
        }
    }
    assert!(warps > 240, "{warps} warps");
    assert!((0..32).all(|w| at(0, w) == (0.0, 0.0)));
}
