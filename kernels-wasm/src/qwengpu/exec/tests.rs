use super::*;
use crate::bitnet::random::Rng;
use crate::qwengpu::deltanet::DeltaNet;
use crate::qwengpu::interp::{Launch, Machine};
use crate::qwengpu::isa::Space;
use crate::qwengpu::isa::{Cmp, MachineSpec, Shfl, Special, Src, ALUS, CMPS, MAX_PARAMS, SHFLS, SPECIALS};
use crate::qwengpu::limbs::{bias, limbs, word};
use crate::qwengpu::limbs::{norm_weights, rms_norm};
use crate::qwengpu::program_image::block_words;
use crate::qwengpu::register_file::{LAUNCH_WORDS, MEMORY_GROUPS};
use crate::qwengpu::suite;
use alloc::string::String;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// The stream: bias 0, the ROM words from 1, the lane's registers, the launch words, the
/// warp's first thread and thread block and the lane's one-hot group after them, the
/// executor's channels from there.
const D: usize = 4096;

struct Lane {
    exec: Exec,
    built: Built,
    order: Vec<usize>,
    /// `exec.stores()` (which builds the ALU to find it).
    stores: usize,
}

/// Global memory in the load mixers' states, as the prompt's memory tokens leave it, and the
/// words written so far (so that only changed words are written again).
struct Memory {
    nets: Vec<DeltaNet>,
    held: Vec<u32>,
    /// Each thread block's shared words written so far.
    shared: Vec<Vec<u32>>,
    /// Each warp's registers, lane by lane, written so far (the shuffle mixers' rows).
    registers: Vec<Vec<Vec<u32>>>,
}

/// Where a lane runs: the launch (block, grid, parameters) and the lane's thread.
#[derive(Debug, Clone)]
struct Context {
    launch: Launch,
    first_tid: usize,
    cta: usize,
    lane: usize,
    /// The warp, and every lane's registers as the block began (a shuffle's sources).
    warp: usize,
    warp_regs: Vec<Vec<u32>>,
}

impl Context {
    /// The interpreter's context of lane `lane` of warp `w` (the block rounded up to warps).
    fn of(m: &Machine, w: usize, lane: usize) -> Context {
        let launch = Launch { block: m.launch.block.next_multiple_of(m.spec.lanes), ..m.launch.clone() };
        let (first_tid, cta) = (m.warps[w].first_tid, m.warps[w].cta);
        Context { launch, first_tid, cta, lane, warp: w, warp_regs: m.warps[w].regs.clone() }
    }

    /// What `s` reads in this context, written out from the ISA's definitions.
    fn special(&self, s: Special) -> u32 {
        (match s {
            Special::Tid => self.first_tid + self.lane,
            Special::Ntid => self.launch.block,
            Special::Ctaid => self.cta,
            Special::Nctaid => self.launch.grid,
            Special::LaneId => self.lane,
            Special::Param(i) => return self.launch.params.get(i as usize).copied().unwrap_or(0),
        }) as u32
    }
}

impl Lane {
    fn new() -> Lane {
        let spec = MachineSpec::second();
        let rom = 1;
        let local = rom + 3 * WORDS * spec.block_len;
        let launch = local + 4 * spec.regs;
        let thread = launch + 3 * LAUNCH_WORDS;
        let lane = thread + 2;
        let memory = lane + 2 * spec.lanes;
        let shared = memory + MEMORY_GROUPS.iter().sum::<usize>();
        let groups = [spec.max_threads / spec.lanes, spec.shared_words, 2];
        let val = shared + groups.iter().sum::<usize>();
        // The register file's write groups: warp, (lane, half), register, then "set".
        let file_warp = val + 3;
        let file = [file_warp, file_warp + groups[0], file_warp + groups[0] + 2 * spec.lanes, 0];
        let file = [file[0], file[1], file[2], file[2] + spec.regs];
        let exec = Exec {
            one: 0,
            rom,
            local,
            regs: spec.regs,
            launch,
            thread,
            lane,
            lanes: spec.lanes,
            memory,
            val: [val, val + 1],
            shared,
            shared_groups: groups,
            reset: val + 2,
            file,
            d_model: D,
            global_words: spec.global_words,
            block_len: spec.block_len,
            first: file[3] + 1,
        };
        assert!(exec.first + exec.len() <= D, "{} channels", exec.len());
        Lane { exec, built: exec.build(), order: (0..D).rev().collect(), stores: exec.stores() }
    }

    fn memory(&self) -> Memory {
        let nets = self.built.mixers.iter().map(|(_, w)| DeltaNet::new(w.clone())).collect();
        let spec = MachineSpec::second();
        let ctas = self.exec.shared_groups[0];
        let registers = vec![vec![vec![0; spec.regs]; spec.lanes]; ctas];
        Memory { nets, held: vec![0; spec.global_words], shared: vec![vec![0; spec.shared_words]; ctas], registers }
    }

    fn norm(&self, x: &[f32]) -> Vec<f32> {
        rms_norm(x, &norm_weights(D), 1e-6, &self.order)
    }

    /// Writes the words of `global` that `memory` does not hold yet, a position per half (as
    /// the prompt's memory tokens do).
    fn sync(&self, memory: &mut Memory, global: &[u32]) {
        let (e, [pages, words, _]) = (self.exec, MEMORY_GROUPS);
        for (w, &want) in global.iter().enumerate() {
            let hot = [e.memory + w / words, e.memory + pages + w % words];
            if memory.held[w] != want {
                self.write(memory, hot, e.memory + pages + words, want);
                memory.held[w] = want;
            }
        }
    }

    /// Writes the registers of warp `w` (lane by lane) that `memory` does not hold yet, a
    /// position per half (as a step's VAL tokens write the register rows).
    fn sync_registers(&self, memory: &mut Memory, w: usize, regs: &[Vec<u32>]) {
        let [warp, lane_half, reg, set] = self.exec.file;
        for (l, values) in regs.iter().enumerate() {
            for (r, &want) in values.iter().enumerate() {
                if memory.registers[w][l][r] != want {
                    self.write(memory, [warp + w, reg + r, set], lane_half + 2 * l, want);
                    memory.registers[w][l][r] = want;
                }
            }
        }
    }

    /// One word's two positions, a half each: the channels `hot` and `half + h` set, the half's
    /// limbs in the VAL channels; every mixer writes where its groups are set, and reads nothing.
    fn write<const N: usize>(&self, memory: &mut Memory, hot: [usize; N], half: usize, want: u32) {
        let e = self.exec;
        for h in 0..2 {
            let mut x = vec![0.0f32; D];
            x[0] = bias(D);
            let v = want >> (16 * h);
            hot.iter().for_each(|&c| x[c] = 1.0);
            x[half + h] = 1.0;
            (x[e.val[0]], x[e.val[1]]) = ((v & 0xff) as f32, (v >> 8 & 0xff) as f32);
            let n = self.norm(&x);
            memory.nets.iter_mut().for_each(|net| assert!(net.step(&n).iter().all(|&y| y == 0.0)));
        }
    }

    /// Writes the words of thread block `cta`'s `shared` memory that `memory` does not hold yet,
    /// a position per half (as a shared store's halves do).
    fn sync_shared(&self, memory: &mut Memory, cta: usize, shared: &[u32]) {
        let (e, [ctas, words, _]) = (self.exec, self.exec.shared_groups);
        for (w, &want) in shared.iter().enumerate() {
            if memory.shared[cta][w] != want {
                self.write(memory, [e.shared + cta, e.shared + ctas + w], e.shared + ctas + words, want);
                memory.shared[cta][w] = want;
            }
        }
    }

    /// The lane's registers after the layers ran `block` on `regs` in `ctx` with `memory`
    /// (`None`: not a word).
    fn run(&self, block: &[Inst], regs: &[u32], ctx: &Context, memory: &Memory) -> Ran {
        let e = self.exec;
        let mut x = vec![0.0f32; D];
        x[0] = bias(D);
        let mut put = |at: usize, words: Vec<u16>| {
            for (k, w) in words.into_iter().enumerate() {
                x[at + 3 * k..][..3].copy_from_slice(&[f32::from(w & 0xff), f32::from(w >> 8), 1.0]);
            }
        };
        put(e.rom, block_words(block).unwrap());
        let l = &ctx.launch;
        let params = (0..MAX_PARAMS).map(|i| l.params.get(i).copied().unwrap_or(0));
        put(
            e.launch,
            [l.block as u16, l.grid as u16]
                .into_iter()
                .chain(params.flat_map(|p| [p as u16, (p >> 16) as u16]))
                .collect(),
        );
        (x[e.thread], x[e.thread + 1], x[e.lane + 2 * ctx.lane]) = (ctx.first_tid as f32, ctx.cta as f32, 1.0);
        // The thread block one-hot, as the register file's store units leave it.
        x[e.shared + ctx.cta] = 1.0;
        // The warp one-hot, as the register file's decode leaves it.
        x[e.file[0] + ctx.warp] = 1.0;
        for (r, &v) in regs.iter().enumerate() {
            x[e.local + LIMBS * r..][..LIMBS].copy_from_slice(&limbs(v));
        }
        self.built.decode.forward(&mut x, 1e-6, &self.order);
        let mut nets = memory.nets.clone().into_iter();
        let mut mixers = self.built.mixers.iter().map(|m| m.0).peekable();
        for (i, layer) in self.built.stages.iter().enumerate() {
            if mixers.next_if_eq(&i).is_some() {
                let y = nets.next().unwrap().step(&self.norm(&x));
                x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
            }
            layer.forward(&mut x, 1e-6, &self.order);
        }
        let regs = (0..e.regs).map(|r| word(&x[e.local + LIMBS * r..][..LIMBS])).collect();
        let kept = |i: usize| {
            let at = self.stores + (1 + LIMBS) * i;
            let index = x[at];
            (index == index.trunc() && index >= 0.0).then_some(index as u32).zip(word(&x[at + 1..at + 1 + LIMBS]))
        };
        Ran { regs, stores: (0..e.block_len).map(kept).collect() }
    }
}

/// What the instructions the executor computes do to the registers, written out plainly from
/// the ISA's definitions (`Alu::eval`, `Cmp::eval`).
fn reference(
    block: &[Inst],
    regs: &mut [u32],
    ctx: &Context,
    global: &[u32],
    shared: &[u32],
) -> Vec<Option<(u32, u32)>> {
    let mut stores = vec![Some((0, 0)); block.len().max(4)];
    let index = |space: Space, base: u32, off: i32| {
        let words = if space == Space::Global { global.len() } else { shared.len() };
        (base.wrapping_add(off as u32) / 4) as usize % words
    };
    for (i, inst) in block.iter().enumerate() {
        let val = |s: Src, regs: &[u32]| match s {
            Src::Reg(r) => regs[r as usize],
            Src::Imm(v) => v,
        };
        match *inst {
            Inst::Mov { d, a } => regs[d as usize] = val(a, regs),
            Inst::Alu { op, d, a, b } => regs[d as usize] = op.eval(val(a, regs), val(b, regs)),
            Inst::Set { cmp, d, a, b } => regs[d as usize] = cmp.eval(val(a, regs), val(b, regs)),
            Inst::Sel { d, c, a, b } => {
                regs[d as usize] = if regs[c as usize] != 0 { val(a, regs) } else { val(b, regs) }
            }
            Inst::S2R { d, s } => regs[d as usize] = ctx.special(s),
            Inst::Ld { space: Space::Global, d, a, off } => {
                regs[d as usize] = global[index(Space::Global, val(a, regs), off)]
            }
            Inst::Ld { space: Space::Shared, d, a, off } => {
                regs[d as usize] = shared[index(Space::Shared, val(a, regs), off)]
            }
            Inst::St { space, a, off, v } => stores[i] = Some((index(space, val(a, regs), off) as u32, val(v, regs))),
            Inst::Shfl { mode, d, a, b } => {
                // The ISA's shuffle (`interp`): another lane's `a` as the block began, which the
                // lowering makes the same as when the shuffle runs.
                let (l, k, n) = (ctx.lane, val(b, regs) as usize, ctx.warp_regs.len());
                let from = match mode {
                    Shfl::Idx => Some(k % n),
                    Shfl::Up => l.checked_sub(k),
                    Shfl::Down => Some(l + k).filter(|&s| s < n),
                    Shfl::Bfly => Some(l ^ k).filter(|&s| s < n),
                };
                regs[d as usize] = match from {
                    Some(s) if s != l => ctx.warp_regs[s][a as usize],
                    _ => regs[a as usize],
                };
            }
            Inst::AtomAdd { space, d, a, off, v } => {
                let (at, v) = (index(space, val(a, regs), off), val(v, regs));
                let old = if space == Space::Global { global[at] } else { shared[at] };
                regs[d as usize] = old;
                stores[i] = Some((at as u32, old.wrapping_add(v)));
            }
            _ => {}
        }
    }
    stores
}

/// What the layers leave: the registers, and each instruction's kept store (word index and
/// word; 0 and 0 where it is not a store). `None`: not an integer or not a word.
#[derive(Debug, PartialEq)]
struct Ran {
    regs: Vec<Option<u32>>,
    stores: Vec<Option<(u32, u32)>>,
}

impl Ran {
    fn of(regs: &[u32], stores: Vec<Option<(u32, u32)>>) -> Ran {
        Ran { regs: regs.iter().map(|&v| Some(v)).collect(), stores }
    }
}

/// Every step of every suite kernel whose block the executor computes, lane by lane: the
/// registers after the layers are the interpreter's after the step (on wasm, a few kernels).
/// Each lane runs on memory as the lanes before it left it (their kept stores written in, as
/// their tokens write the model's rows), which is how a later lane's atomic sees an earlier one's.
#[test]
fn supported_blocks_of_the_suite_run_as_the_interpreter_runs_them() {
    let lane = Lane::new();
    let spec = MachineSpec::second();
    let few = ["gcd", "clamp3", "nested_loops"];
    let (mut lanes, mut steps, mut all_steps, mut changed, mut loads, mut stores) = (0, 0, 0, 0, 0, 0);
    let (mut shared_steps, mut atomics, mut shuffles) = (0, 0, 0);
    for k in suite::kernels().iter().filter(|k| !cfg!(target_arch = "wasm32") || few.contains(&k.name)) {
        let (kernel, _, mut m): (_, _, Machine) = k.machine(k.ptx, &spec).unwrap();
        let mut memory = lane.memory();
        while !m.finished() {
            let wi = m.current;
            let (pc, mask) = m.warps[wi].active();
            let block = &kernel.program.blocks[pc];
            let cta = m.warps[wi].cta;
            let (before, mut global, mut shared) = (m.warps[wi].regs.clone(), m.global.clone(), m.shared.clone());
            m.step().unwrap();
            all_steps += 1;
            if !block.iter().all(supports) {
                continue;
            }
            steps += 1;
            loads += usize::from(block.iter().any(|i| matches!(i, Inst::Ld { .. } | Inst::AtomAdd { .. })));
            stores += usize::from(block.iter().any(Inst::writes_memory));
            atomics += usize::from(block.iter().any(|i| matches!(i, Inst::AtomAdd { .. })));
            shuffles += usize::from(block.iter().any(|i| matches!(i, Inst::Shfl { .. })));
            shared_steps += usize::from(block.iter().any(|i| i.memory_space() == Some(Space::Shared)));
            for l in (0..spec.lanes).filter(|l| mask & 1 << l != 0) {
                let at = alloc::format!("{}: step {}, warp {wi} block {pc} lane {l}: {block:?}", k.name, m.steps);
                let (after, mut ctx) = (&m.warps[wi].regs[l], Context::of(&m, wi, l));
                ctx.warp_regs = before.clone();
                lane.sync(&mut memory, &global);
                lane.sync_shared(&mut memory, cta, &shared);
                // The register rows as the VAL tokens leave them: the lanes before this one
                // have their values after the block (registers a shuffle reads are not among
                // the ones the block writes), the rest theirs before it.
                let rows: Vec<Vec<u32>> =
                    (0..spec.lanes).map(|j| if j < l { &m.warps[wi].regs[j] } else { &before[j] }.clone()).collect();
                lane.sync_registers(&mut memory, wi, &rows);
                let mut plain = before[l].clone();
                let want = reference(block, &mut plain, &ctx, &global, &shared);
                assert_eq!(&plain, after, "{at}: the plain reference");
                let got = lane.run(block, &before[l], &ctx, &memory);
                assert_eq!(got, Ran::of(after, want.clone()), "{at}");
                // The lane's kept stores, instruction by instruction.
                for (i, inst) in block.iter().enumerate().filter(|(_, i)| i.writes_memory()) {
                    let to = if inst.memory_space() == Some(Space::Global) { &mut global } else { &mut shared };
                    want[i].into_iter().for_each(|(w, v)| to[w as usize] = v);
                }
                lanes += 1;
                changed += usize::from(after != &before[l]);
            }
            // Written lane by lane, they are the interpreter's memory after the step (shared
            // memory, where the step did not end its thread block, which clears it).
            assert_eq!(global, m.global, "{}: step {}, block {pc}: memory after the stores", k.name, m.steps);
            if m.warps.get(m.current).is_some_and(|w| w.cta == cta) && !m.finished() {
                assert_eq!(shared, m.shared, "{}: step {}, block {pc}: shared memory", k.name, m.steps);
            }
        }
    }
    let summary = alloc::format!(
        "{steps} of {all_steps} steps ({loads} loading, {stores} storing, {atomics} atomic, {shared_steps} with shared memory, {shuffles} shuffling), {changed} of {lanes} lanes changed"
    );
    #[cfg(not(target_arch = "wasm32"))]
    std::eprintln!("{summary}");
    let native = !cfg!(target_arch = "wasm32");
    assert!(
        steps * 4 > all_steps
            && changed * 2 > lanes
            && (!native
                || loads + stores > 200 && shared_steps > 100 && atomics >= 16 && shuffles >= 20 && steps == all_steps),
        "{summary}"
    );
}

/// Random blocks of the operations the executor computes, on random and edge-case registers,
/// against the plain reference.
#[test]
fn random_blocks_match_the_isa() {
    let lane = Lane::new();
    let mut rng = Rng::new(9);
    let edges = [0, 1, 7, 31, 32, 0x7f, 0x80, 0xff, 0x100, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];
    let mut next = |n: u64| (rng.next_u64() % n) as usize;
    let alus: Vec<Alu> =
        ALUS.into_iter().filter(|&op| supports(&Inst::Alu { op, d: 0, a: Src::Imm(0), b: Src::Imm(0) })).collect();
    let specials: Vec<Special> = SPECIALS.into_iter().chain((0..MAX_PARAMS as u8).map(Special::Param)).collect();
    let rounds = if cfg!(target_arch = "wasm32") { 20 } else { 150 };
    let mut shuffles = 0;
    let mut memory = lane.memory();
    for round in 0..rounds {
        let value = |next: &mut dyn FnMut(u64) -> usize| match next(3) {
            0 => edges[next(edges.len() as u64)],
            _ => (next(1 << 32) as u32).rotate_left(next(32) as u32),
        };
        let regs: Vec<u32> = (0..15).map(|_| value(&mut next)).collect();
        let ntid = 4 * (1 + next(8));
        let grid = 1 + next((128 / ntid) as u64);
        let params = (0..next(MAX_PARAMS as u64 + 1)).map(|_| value(&mut next)).collect();
        let (first_tid, cta, l) = (4 * next(ntid as u64 / 4), next(grid as u64), next(4));
        // The warp's other lanes' registers, in the register rows (a shuffle's sources).
        let warp = next(32);
        let mut warp_regs: Vec<Vec<u32>> = (0..4).map(|_| (0..15).map(|_| value(&mut next)).collect()).collect();
        warp_regs[l] = regs.clone();
        lane.sync_registers(&mut memory, warp, &warp_regs);
        let launch = Launch { grid, block: ntid, params };
        let ctx = Context { launch, first_tid, cta, lane: l, warp, warp_regs };
        let global: Vec<u32> = (0..MachineSpec::second().global_words).map(|_| value(&mut next)).collect();
        lane.sync(&mut memory, &global);
        // A store or an atomic only last: a load after a store of the same word would read it in
        // the ISA, and the executor's loads read memory as the step began (the split is the
        // lowering's, docs §12, §15).
        let block: Vec<Inst> = (0..4)
            .map(|i| {
                let r = |next: &mut dyn FnMut(u64) -> usize| next(15) as u8;
                let src = |next: &mut dyn FnMut(u64) -> usize| match next(3) {
                    0 => Src::Imm(value(next)),
                    _ => Src::Reg(r(next)),
                };
                let (d, a, b) = (r(&mut next), src(&mut next), src(&mut next));
                if i == 3 && next(3) == 0 {
                    let off = next(1 << 9) as i32 - 256;
                    return match next(3) {
                        0 => Inst::St { space: Space::Global, a, off, v: b },
                        1 => Inst::AtomAdd { space: Space::Global, d, a, off, v: b },
                        _ => Inst::AtomAdd { space: Space::Shared, d, a, off, v: b },
                    };
                }
                match next(12) {
                    // Offsets below the lanes mostly, so that most shuffles read another lane.
                    11 => {
                        let b = if next(4) > 0 { Src::Imm(next(6) as u32) } else { b };
                        Inst::Shfl { mode: SHFLS[next(4)], d, a: r(&mut next), b }
                    }
                    10 => Inst::Ld { space: Space::Global, d, a, off: next(1 << 9) as i32 - 256 },
                    8 | 9 => Inst::S2R { d, s: specials[next(specials.len() as u64)] },
                    0 => Inst::Mov { d, a },
                    1 => Inst::Sel { d, c: r(&mut next), a, b },
                    2 | 3 => Inst::Set { cmp: CMPS[next(CMPS.len() as u64)], d, a, b },
                    _ => Inst::Alu { op: alus[next(alus.len() as u64)], d, a, b },
                }
            })
            .collect();
        // Lanes in turn: no instruction of the block writes a register a shuffle in it reads.
        let shuffled: Vec<u8> = block.iter().filter_map(Inst::shuffle_source).collect();
        if block.iter().any(|i| i.write().is_some_and(|d| shuffled.contains(&d))) {
            continue;
        }
        shuffles += usize::from(!shuffled.is_empty());
        let mut want = regs.clone();
        let stores = reference(&block, &mut want, &ctx, &global, &[0; 32]);
        let got = lane.run(&block, &regs, &ctx, &memory);
        let at = alloc::format!("round {round}: {block:?} on {regs:x?} in {ctx:?}");
        assert_eq!(got, Ran::of(&want, stores), "{at}");
    }
    assert!(shuffles * 10 > rounds, "{shuffles} blocks with a shuffle in {rounds}");
}

/// An instruction the executor does not compute writes nothing (it is left to the layers still
/// to come), and what it does compute after it still runs.
#[test]
fn unsupported_instructions_write_nothing() {
    let lane = Lane::new();
    let regs: Vec<u32> = (0..15).map(|r| 1000 + r).collect();
    let block = [
        Inst::Alu { op: Alu::DivS, d: 1, a: Src::Reg(8), b: Src::Imm(3) },
        Inst::Alu { op: Alu::RemS, d: 2, a: Src::Reg(3), b: Src::Imm(1) },
        Inst::Alu { op: Alu::DivU, d: 4, a: Src::Reg(5), b: Src::Reg(6) },
        Inst::Set { cmp: Cmp::LtU, d: 7, a: Src::Reg(1), b: Src::Reg(2) },
    ];
    assert!(block[..3].iter().all(|i| !supports(i)) && supports(&block[3]));
    let mut want: Vec<u32> = regs.clone();
    want[7] = 1;
    let launch = Launch { grid: 1, block: 4, params: vec![] };
    let ctx = Context { launch, first_tid: 0, cta: 0, lane: 0, warp: 0, warp_regs: vec![regs.clone(); 4] };
    let got = lane.run(&block, &regs, &ctx, &lane.memory());
    assert_eq!(got, Ran::of(&want, vec![Some((0, 0)); 4]));
}

/// The decode lights exactly one source for each opcode the executor computes and none for the
/// others.
#[test]
fn each_opcode_lights_its_source() {
    let lane = Lane::new();
    let n = lane.built.sources.len();
    let e = lane.exec;
    for (code, &op) in opcodes().iter().enumerate() {
        let mut x = vec![0.0f32; D];
        x[0] = bias(D);
        x[e.rom] = code as f32;
        lane.built.decode.forward(&mut x, 1e-6, &lane.order);
        let flags = &x[e.first..e.first + n];
        let lit: Vec<Source> =
            lane.built.sources.iter().zip(flags).filter(|(_, &f)| f == 1.0).map(|(&s, _)| s).collect();
        let stray: String = flags.iter().filter(|&&f| f != 0.0 && f != 1.0).map(|f| alloc::format!("{f} ")).collect();
        assert!(stray.is_empty(), "{op:?}: flags {stray}");
        let want = match op {
            IsaOp::Mov => vec![Source::Mov],
            IsaOp::Sel => vec![Source::Sel],
            IsaOp::Alu(a) if supports(&Inst::Alu { op: a, d: 0, a: Src::Imm(0), b: Src::Imm(0) }) => {
                vec![Source::Alu(Op::Alu(a))]
            }
            IsaOp::Set(c) => vec![Source::Alu(Op::Cmp(c))],
            IsaOp::S2R(s) => vec![Source::Special(s)],
            IsaOp::Ld(Space::Global) | IsaOp::Atom(Space::Global) => vec![Source::Load],
            IsaOp::Ld(Space::Shared) | IsaOp::Atom(Space::Shared) => vec![Source::LoadShared],
            IsaOp::Shfl(m) => vec![Source::Shfl(m)],
            _ => vec![],
        };
        assert_eq!(lit, want, "opcode {code} ({op:?})");
    }
}
