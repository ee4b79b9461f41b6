//! The reference interpreter of the qwenGPU machine: the definition the compiled layers are
//! checked against after every step.
//!
//! A launch of `grid × block` threads (the block rounded up to whole warps) runs its thread
//! blocks one after another. Within a thread block, warps run one after another: the current
//! warp runs steps until it exits or reaches a barrier, then the next live warp runs; when every
//! live warp waits at the barrier, they are all released and warp 0 goes on.
//!
//! A step runs one ROM block for one warp, for the lanes of the top entry of the warp's SIMT
//! stack (pc, join, mask). A branch on which the active lanes disagree turns the top entry into
//! the merge (pc := the branch's join block) and pushes the fall-through lanes, then the taken
//! lanes, each to run until it reaches the join; an entry that reaches its join is popped, so
//! the lanes merge there (immediate post-dominator reconvergence, as GPUs do it). A loop whose
//! lanes leave at different iterations pushes at most one entry per leaving lane, so the stack
//! is never deeper than lanes × nesting. The stack is the machine's SIMT state.
//!
//! The second machine ([`Reconverge::LowestPc`]) keeps no stack: each lane has a PC, and a step
//! runs the lanes at the warp's lowest PC. Its ROM order (`layout`) puts every join after the
//! paths that reach it and every loop's exit after the loop, so the lanes merge at the joins as
//! on the stack, and sometimes earlier (the suite takes 7,616 steps instead of 8,037). A
//! lane's next PC is a function of its block and its own branch predicate, so the model can
//! write it without reading it first (`docs/qwengpu-second-machine.md` §24).

use super::isa::{Inst, MachineSpec, Program, Reconverge, Shfl, Space, Special, Src};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    #[error("the program does not fit the machine: {0}")]
    Program(String),
    #[error("launch of {grid} × {block} threads: {why}")]
    Launch { grid: usize, block: usize, why: String },
    #[error("{words} words of input do not fit the machine's {capacity} words of global memory")]
    Memory { words: usize, capacity: usize },
    #[error("lanes of warp {warp} reached block {pc}, past the end of the ROM ({blocks} blocks)")]
    PcOutOfRom { warp: usize, pc: usize, blocks: usize },
    #[error("no result after {0} steps (an endless loop?)")]
    StepLimit(u64),
}

/// A launch: thread blocks, threads per block, and the kernel's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub grid: usize,
    pub block: usize,
    pub params: Vec<u32>,
}

/// One machine step: warp `warp` (global index) ran ROM block `block` with lanes `mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRecord {
    pub warp: usize,
    pub block: usize,
    pub mask: u32,
}

/// A store of a step (or an atomic's write), as the second machine's tokens carry it: the lane,
/// the space, the word index and the word (in the order the interpreter makes them: instruction by instruction,
/// lanes in order within each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub lane: usize,
    pub space: Space,
    pub word: u32,
    pub value: u32,
}

/// One entry of a warp's SIMT stack: lanes `mask` run from block `pc` until they reach `join`
/// (`None`: the bottom entry, which runs until its lanes exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub pc: usize,
    pub join: Option<usize>,
    pub mask: u32,
}

/// One warp's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warp {
    /// Thread block, and the thread index of lane 0 within it.
    pub cta: usize,
    pub first_tid: usize,
    /// `regs[lane][r]`.
    pub regs: Vec<Vec<u32>>,
    /// The SIMT stack ([`Reconverge::Stack`]; empty under [`Reconverge::LowestPc`]).
    pub stack: Vec<Entry>,
    /// Each lane's PC, `None` once it exited ([`Reconverge::LowestPc`]; empty under
    /// [`Reconverge::Stack`]).
    pub pcs: Vec<Option<usize>>,
    pub at_barrier: bool,
}

impl Warp {
    pub fn finished(&self) -> bool {
        self.stack.is_empty() && self.pcs.iter().all(Option::is_none)
    }

    /// The block that runs next and its lanes: the stack's top entry, or the lowest PC and the
    /// lanes at it.
    pub fn active(&self) -> (usize, u32) {
        match self.pcs.iter().flatten().min() {
            Some(&low) => {
                (low, self.pcs.iter().enumerate().filter(|&(_, &p)| p == Some(low)).fold(0, |m, (l, _)| m | 1 << l))
            }
            None => self.stack.last().map(|e| (e.pc, e.mask)).unwrap_or((0, 0)),
        }
    }

    /// Pops entries that reached their join or lost all their lanes.
    fn settle(&mut self) {
        while let Some(top) = self.stack.last() {
            if top.mask != 0 && Some(top.pc) != top.join {
                break;
            }
            self.stack.pop();
        }
    }
}

/// A machine mid-launch: everything the compiled layers' state rows must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub spec: MachineSpec,
    pub program: Program,
    pub launch: Launch,
    pub global: Vec<u32>,
    /// The running thread block's shared memory (cleared for each block).
    pub shared: Vec<u32>,
    pub warps: Vec<Warp>,
    /// The warp that runs next.
    pub current: usize,
    pub steps: u64,
}

impl Program {
    /// Checks the program against the machine's sizes.
    pub fn check(&self, spec: &MachineSpec) -> Result<(), MachineError> {
        let bad = |why: String| Err(MachineError::Program(why));
        if self.blocks.is_empty() || self.blocks.len() > spec.rom_blocks {
            return bad(alloc::format!("{} blocks; the ROM holds 1 to {}", self.blocks.len(), spec.rom_blocks));
        }
        for (b, block) in self.blocks.iter().enumerate() {
            if block.is_empty() || block.len() > spec.block_len {
                return bad(alloc::format!(
                    "block {b} has {} instructions; blocks hold 1 to {}",
                    block.len(),
                    spec.block_len
                ));
            }
            if block[..block.len() - 1].iter().any(Inst::is_terminator) {
                return bad(alloc::format!("block {b}: a branch, barrier or exit before the block's end"));
            }
            if spec.lanes_in_turn && (1..block.len()).any(|i| block[i].conflicts(&block[..i])) {
                return bad(alloc::format!(
                    "block {b} writes memory and accesses it again, or writes a register a shuffle in it reads; a machine whose lanes run in turn takes neither"
                ));
            }
            if spec.lanes_in_turn && block.iter().any(Inst::shuffles_onto_itself) {
                return bad(alloc::format!(
                    "block {b}: a shuffle writes its own source; a machine whose lanes run in turn needs another register"
                ));
            }
            for inst in block {
                if let Some(r) = inst.registers().into_iter().find(|&r| r as usize >= spec.regs) {
                    return bad(alloc::format!("block {b}: register r{r}; the machine has r0..r{}", spec.regs - 1));
                }
                if let Inst::Bra { target, join, .. } = inst {
                    // A join at the ROM's end is the program's exit: reached by no lane.
                    if *target as usize >= self.blocks.len() || *join as usize > self.blocks.len() {
                        return bad(alloc::format!(
                            "block {b}: branch to block {target} or join at {join}, past the ROM"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Machine {
    /// A launch with `input` in global memory (the rest zero).
    pub fn new(spec: MachineSpec, program: Program, input: &[u32], launch: Launch) -> Result<Machine, MachineError> {
        // Masks are u32 and registers are named by u8; memories must hold a word.
        if !(1..=32).contains(&spec.lanes)
            || !(2..=255).contains(&spec.regs)
            || spec.global_words == 0
            || spec.shared_words == 0
        {
            return Err(MachineError::Program(alloc::format!("machine sizes out of range: {spec:?}")));
        }
        program.check(&spec)?;
        let (grid, threads) = (launch.grid, launch.block);
        let bad = |why: String| Err(MachineError::Launch { grid, block: threads, why });
        let block = launch.block.next_multiple_of(spec.lanes);
        if launch.grid == 0 || launch.block == 0 {
            return bad("an empty launch".into());
        }
        if block > spec.max_block_threads {
            return bad(alloc::format!("blocks hold at most {} threads", spec.max_block_threads));
        }
        if launch.grid * block > spec.max_threads {
            return bad(alloc::format!("a launch runs at most {} threads", spec.max_threads));
        }
        if input.len() > spec.global_words {
            return Err(MachineError::Memory { words: input.len(), capacity: spec.global_words });
        }
        let mut global = vec![0; spec.global_words];
        global[..input.len()].copy_from_slice(input);
        let warps = (0..launch.grid)
            .flat_map(|cta| (0..block / spec.lanes).map(move |w| (cta, w * spec.lanes)))
            .map(|(cta, first_tid)| Warp {
                cta,
                first_tid,
                regs: vec![vec![0; spec.regs]; spec.lanes],
                stack: match spec.reconverge {
                    Reconverge::Stack => vec![Entry { pc: 0, join: None, mask: (1 << spec.lanes) - 1 }],
                    Reconverge::LowestPc => Vec::new(),
                },
                pcs: match spec.reconverge {
                    Reconverge::Stack => Vec::new(),
                    Reconverge::LowestPc => vec![Some(0); spec.lanes],
                },
                at_barrier: false,
            })
            .collect();
        Ok(Machine { spec, program, launch, global, shared: vec![0; spec.shared_words], warps, current: 0, steps: 0 })
    }

    pub fn finished(&self) -> bool {
        self.current >= self.warps.len()
    }

    fn special(&self, w: &Warp, lane: usize, s: Special) -> u32 {
        let block = self.launch.block.next_multiple_of(self.spec.lanes);
        (match s {
            Special::Tid => w.first_tid + lane,
            Special::Ntid => block,
            Special::Ctaid => w.cta,
            Special::Nctaid => self.launch.grid,
            Special::LaneId => lane,
            Special::Param(i) => return self.launch.params.get(i as usize).copied().unwrap_or(0),
        }) as u32
    }

    /// The record of the step that runs next; `None` once every warp has finished.
    pub fn next_record(&self) -> Option<StepRecord> {
        let (block, mask) = self.warps.get(self.current)?.active();
        Some(StepRecord { warp: self.current, block, mask })
    }

    /// Runs one step; `None` once every warp has finished.
    pub fn step(&mut self) -> Result<Option<StepRecord>, MachineError> {
        Ok(self.step_stored()?.map(|(record, _)| record))
    }

    /// [`Self::step`], with the step's stores (`st`, not atomics).
    pub fn step_stored(&mut self) -> Result<Option<(StepRecord, Vec<Stored>)>, MachineError> {
        if self.finished() {
            return Ok(None);
        }
        let wi = self.current;
        let (pc, mask) = self.warps[wi].active();
        let blocks = self.program.blocks.len();
        if pc >= blocks {
            return Err(MachineError::PcOutOfRom { warp: wi, pc, blocks });
        }
        let lanes: Vec<usize> = (0..self.spec.lanes).filter(|l| mask & (1 << l) != 0).collect();
        let block = self.program.blocks[pc].clone();
        let (mut exited, mut stored) = (0u32, Vec::new());
        for inst in &block {
            self.execute(wi, &lanes, inst, &mut exited, &mut stored);
        }
        let w = &mut self.warps[wi];
        // A branch's target, join and the lanes that take it (all of them for an unconditional one).
        let branch = match block.last() {
            Some(&Inst::Bra { target, c, neg, join }) => {
                let taken = lanes
                    .iter()
                    .filter(|&&l| c.is_none_or(|c| (w.regs[l][c as usize] != 0) != neg))
                    .fold(0u32, |m, &l| m | 1 << l);
                Some((target as usize, join as usize, taken))
            }
            _ => None,
        };
        match self.spec.reconverge {
            Reconverge::LowestPc => {
                for &l in &lanes {
                    w.pcs[l] = match branch {
                        _ if exited & 1 << l != 0 => None,
                        Some((target, _, taken)) if taken & 1 << l != 0 => Some(target),
                        _ => Some(pc + 1),
                    };
                }
            }
            Reconverge::Stack => {
                let top = w.stack.len() - 1;
                w.stack[top].pc = pc + 1;
                if let Some((target, join, taken)) = branch {
                    let not_taken = mask & !taken;
                    if not_taken == 0 {
                        w.stack[top].pc = target;
                    } else if taken != 0 {
                        // Divergence: the top entry becomes the merge at `join`; each path runs to it.
                        w.stack[top].pc = join;
                        let join = Some(join);
                        w.stack.push(Entry { pc: pc + 1, join, mask: not_taken });
                        w.stack.push(Entry { pc: target, join, mask: taken });
                    }
                }
                if exited != 0 {
                    for e in &mut w.stack {
                        e.mask &= !exited;
                    }
                }
                w.settle();
            }
        }
        self.steps += 1;
        self.schedule();
        Ok(Some((StepRecord { warp: wi, block: pc, mask }, stored)))
    }

    fn execute(&mut self, wi: usize, lanes: &[usize], inst: &Inst, exited: &mut u32, stored: &mut Vec<Stored>) {
        let get = |w: &Warp, l: usize, s: Src| match s {
            Src::Reg(r) => w.regs[l][r as usize],
            Src::Imm(v) => v,
        };
        let address = |base: u32, off: i32, words: usize| (base.wrapping_add(off as u32) / 4) as usize % words;
        match *inst {
            Inst::Shfl { mode, d, a, b } => {
                let w = &self.warps[wi];
                let n = self.spec.lanes;
                let values: Vec<(usize, u32)> = lanes
                    .iter()
                    .map(|&l| {
                        let k = get(w, l, b) as usize;
                        let from = match mode {
                            Shfl::Idx => Some(k % n),
                            Shfl::Up => l.checked_sub(k),
                            Shfl::Down => Some(l + k).filter(|&s| s < n),
                            Shfl::Bfly => Some(l ^ k).filter(|&s| s < n),
                        };
                        (l, w.regs[from.unwrap_or(l)][a as usize])
                    })
                    .collect();
                for (l, v) in values {
                    self.warps[wi].regs[l][d as usize] = v;
                }
            }
            _ => {
                for &l in lanes {
                    let w = &self.warps[wi];
                    match *inst {
                        Inst::Mov { d, a } => self.warps[wi].regs[l][d as usize] = get(w, l, a),
                        Inst::Alu { op, d, a, b } => {
                            self.warps[wi].regs[l][d as usize] = op.eval(get(w, l, a), get(w, l, b))
                        }
                        Inst::Set { cmp, d, a, b } => {
                            self.warps[wi].regs[l][d as usize] = cmp.eval(get(w, l, a), get(w, l, b))
                        }
                        Inst::Sel { d, c, a, b } => {
                            let v = if w.regs[l][c as usize] != 0 { get(w, l, a) } else { get(w, l, b) };
                            self.warps[wi].regs[l][d as usize] = v;
                        }
                        Inst::S2R { d, s } => {
                            let v = self.special(w, l, s);
                            self.warps[wi].regs[l][d as usize] = v;
                        }
                        Inst::Ld { space, d, a, off } | Inst::AtomAdd { space, d, a, off, .. } => {
                            let mem = match space {
                                Space::Global => &mut self.global,
                                Space::Shared => &mut self.shared,
                            };
                            let at = address(get(w, l, a), off, mem.len());
                            let old = mem[at];
                            if let Inst::AtomAdd { v, .. } = *inst {
                                mem[at] = old.wrapping_add(get(w, l, v));
                                stored.push(Stored { lane: l, space, word: at as u32, value: mem[at] });
                            }
                            self.warps[wi].regs[l][d as usize] = old;
                        }
                        Inst::St { space, a, off, v } => {
                            let mem = match space {
                                Space::Global => &mut self.global,
                                Space::Shared => &mut self.shared,
                            };
                            let at = address(get(w, l, a), off, mem.len());
                            mem[at] = get(w, l, v);
                            stored.push(Stored { lane: l, space, word: at as u32, value: mem[at] });
                        }
                        // Branches act on the whole warp, after the block (see `step`).
                        Inst::Bra { .. } => {}
                        Inst::Bar => self.warps[wi].at_barrier = true,
                        Inst::Exit => *exited |= 1 << l,
                        Inst::Shfl { .. } => {}
                    }
                }
            }
        }
    }

    /// After a step: keep the current warp unless it finished or waits at a barrier; then the
    /// next live warp of the same thread block; when all of its live warps wait, release them;
    /// when all finished, the next thread block (with cleared shared memory).
    fn schedule(&mut self) {
        let w = &self.warps[self.current];
        if !w.finished() && !w.at_barrier {
            return;
        }
        let cta = w.cta;
        let in_cta: Vec<usize> = (0..self.warps.len()).filter(|&i| self.warps[i].cta == cta).collect();
        let live: Vec<usize> = in_cta.iter().copied().filter(|&i| !self.warps[i].finished()).collect();
        if let Some(&i) = live.iter().find(|&&i| i > self.current && !self.warps[i].at_barrier) {
            self.current = i;
        } else if let Some(&i) = live.iter().find(|&&i| !self.warps[i].at_barrier) {
            self.current = i;
        } else if let Some(&first) = live.first() {
            for &i in &live {
                self.warps[i].at_barrier = false;
            }
            self.current = first;
        } else {
            self.current = in_cta.last().map(|&i| i + 1).unwrap_or(self.warps.len());
            self.shared.iter_mut().for_each(|v| *v = 0);
        }
    }

    /// Runs to the end (at most `limit` steps), returning every step.
    pub fn run(&mut self, limit: u64) -> Result<Vec<StepRecord>, MachineError> {
        Ok(self.run_each(limit, |_, _| ())?.into_iter().map(|(r, ())| r).collect())
    }

    /// [`Self::run`], calling `look` on the machine after each step, its answers kept beside
    /// the steps.
    pub fn run_each<T>(
        &mut self,
        limit: u64,
        mut look: impl FnMut(&Machine, &StepRecord) -> T,
    ) -> Result<Vec<(StepRecord, T)>, MachineError> {
        let mut records = Vec::new();
        while let Some(r) = self.step()? {
            let seen = look(self, &r);
            records.push((r, seen));
            if self.steps >= limit && !self.finished() {
                return Err(MachineError::StepLimit(limit));
            }
        }
        Ok(records)
    }
}
