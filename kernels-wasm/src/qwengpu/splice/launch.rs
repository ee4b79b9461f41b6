//! A kernel launched inside the spliced model (`docs/qwengpu-second-machine.md` §19, §26): the
//! host feeds the prompt (the reset record, the program image, global memory and the launch);
//! from there the model's own argmax over its whole vocabulary picks every token, each step's
//! record (`next_record`), its VAL tokens, and [`END`] after the last step, and each is fed back
//! as the next input. The arrays are read from those tokens: the prompt's memory with each
//! global store token the model generated written in.
//!
//! The interpreter runs beside the model in lockstep as a check: a token that is not the
//! interpreter's stops the launch with [`LaunchError::Diverged`], naming the step and the token
//! (token 0 is the step's record). So every array printed was carried by tokens the model
//! chose, and is the interpreter's.

use super::drift::CHUNK;
use super::{Runner, Splice, SpliceError};
use crate::bitnet::model::sample::greedy as argmax;
use crate::qwengpu::interp::{Launch, Machine, MachineError, StepRecord};
use crate::qwengpu::isa::{MachineSpec, Program};
use crate::qwengpu::machine_tokens::Token;
use crate::qwengpu::next_record::END;
use crate::qwengpu::register_file::{self, store_slots, ImageTooLarge, RegisterFile};
use alloc::vec::Vec;
use core::ops::ControlFlow;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    Image(#[from] ImageTooLarge),
    #[error(transparent)]
    Splice(#[from] SpliceError),
    #[error("stopped after {steps} steps, as asked")]
    Stopped { steps: u64 },
    #[error("step {step} (warp {warp}, block {block}), token {token}: the model chose {got:?}, the interpreter has {want:?}")]
    Diverged { step: u64, warp: usize, block: usize, token: usize, got: Option<Token>, want: Token },
}

/// What a launch left: global memory as the model's tokens carried it, and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    pub global: Vec<u32>,
    pub steps: u64,
    /// Tokens fed: the prompt's, then the records (and [`END`]) and VAL tokens the model chose.
    pub tokens: u64,
    pub prompt: u64,
    /// Tokens the model's argmax chose: records, [`END`] and VAL tokens (and the stores among
    /// them, three tokens each).
    pub chosen: u64,
    pub stores: u64,
}

/// One token a launch fed the model: `chosen` where the model's argmax picked it (a record or a
/// VAL token), else the host's (the prompt); `steps` begun (the prompt's are 0) and `tokens`
/// fed so far, this one included; `ends_step` where it is its step's last token (after it the
/// state rows hold everything the step wrote).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    pub token: Token,
    pub chosen: bool,
    pub steps: u64,
    pub tokens: u64,
    pub ends_step: bool,
}

/// Runs `program` with `memory` and `launch` on `spec` (`MachineSpec::second()`, the machine the
/// splice holds) inside `runner`, at most `max_steps` steps; `fed` hears of every token, and
/// stops the launch where it answers [`ControlFlow::Break`] (at the end of a prompt chunk or a
/// step, so the context never holds half a step).
pub fn launch(
    runner: &mut Runner,
    splice: &Splice,
    machine: (MachineSpec, &Program),
    memory: &[u32],
    launch: &Launch,
    max_steps: u64,
    mut fed: impl FnMut(Fed) -> ControlFlow<()>,
) -> Result<Launched, LaunchError> {
    launch_observed(runner, splice, machine, memory, launch, max_steps, |f, _| fed(f))
}

/// [`launch`], with `fed` shown the runner after each token (to read its state rows: the tab's
/// step view).
pub fn launch_observed(
    runner: &mut Runner,
    splice: &Splice,
    (spec, program): (MachineSpec, &Program),
    memory: &[u32],
    launch: &Launch,
    max_steps: u64,
    mut fed: impl FnMut(Fed, &Runner) -> ControlFlow<()>,
) -> Result<Launched, LaunchError> {
    let mut m = Machine::new(spec, program.clone(), memory, launch.clone())?;
    let rf = &splice.registers;
    let prompt = rf.prompt_tokens(program, launch, memory)?;
    // The prompt is the host's: it runs CHUNK positions at a time (the same bits as one by one).
    let mut logits = Vec::new();
    for (c, chunk) in prompt.chunks(CHUNK).enumerate() {
        logits = runner.forward_last(&chunk.iter().map(|&t| splice.token_id(t)).collect::<Vec<_>>())?;
        let mut flow = ControlFlow::Continue(());
        for (i, &t) in chunk.iter().enumerate() {
            let tokens = (c * CHUNK + i) as u64 + 1;
            flow = fed(Fed { token: t, chosen: false, steps: 0, tokens, ends_step: false }, runner);
        }
        if flow.is_break() {
            return Err(LaunchError::Stopped { steps: 0 });
        }
    }
    let mut out = Launched {
        global: m.global.clone(),
        steps: 0,
        tokens: prompt.len() as u64,
        prompt: prompt.len() as u64,
        chosen: 0,
        stores: 0,
    };
    let sent = register_file::sent(program);
    let mut last = StepRecord { warp: 0, block: 0, mask: 0 };
    loop {
        if m.steps >= max_steps && !m.finished() {
            return Err(MachineError::StepLimit(max_steps).into());
        }
        // The model names the next record (after the prompt, the first; after the last step,
        // `END`), and the interpreter beside it must have the same.
        let next = m.next_record();
        let record = record_token(next);
        let got = splice.machine_token(argmax(&logits) as usize);
        if got != Some(record) {
            let at = next.unwrap_or(last);
            return Err(LaunchError::Diverged {
                step: m.steps,
                warp: at.warp,
                block: at.block,
                token: 0,
                got,
                want: record,
            });
        }
        logits = runner.forward(splice.token_id(record))?;
        out.tokens += 1;
        out.chosen += 1;
        let record_fed = |ends_step, steps| Fed { token: record, chosen: true, steps, tokens: out.tokens, ends_step };
        let Some(_) = next else {
            // The launch is over: a stop asked at its end record changes nothing.
            let _ = fed(record_fed(false, m.steps), runner);
            break;
        };
        let (step, stored) = m.step_stored()?.ok_or(MachineError::StepLimit(m.steps))?;
        last = step;
        let live_out = sent[step.block];
        let want = RegisterFile::step_tokens(&step, live_out, &m.warps[step.warp].regs, &stored);
        let mut flow = fed(record_fed(want.len() == 1, m.steps), runner);
        // A lane's slots: two per live-out register, then three per store (index, low, high).
        let regs = 2 * live_out.count_ones() as usize;
        let spaces = store_slots(&program.blocks[step.block]);
        let per_lane = regs + 3 * spaces.len();
        let mut index = 0;
        for (i, &w) in want.iter().enumerate().skip(1) {
            let got = splice.machine_token(argmax(&logits) as usize);
            let Some(Token::Val(v)) = got.filter(|&g| g == w) else {
                let (step, warp, block) = (m.steps - 1, step.warp, step.block);
                return Err(LaunchError::Diverged { step, warp, block, token: i, got, want: w });
            };
            logits = runner.forward(splice.token_id(Token::Val(v)))?;
            out.chosen += 1;
            out.tokens += 1;
            let ends_step = i + 1 == want.len();
            flow =
                fed(Fed { token: Token::Val(v), chosen: true, steps: m.steps, tokens: out.tokens, ends_step }, runner);
            // The model's store tokens write the host's copy of global memory.
            let slot = (i - 1) % per_lane;
            if slot >= regs {
                let (k, part) = ((slot - regs) / 3, (slot - regs) % 3);
                let global = !spaces[k].1;
                let word = out.global.get_mut(index).filter(|_| global);
                match (part, word) {
                    (0, _) => index = v as usize,
                    (1, Some(w)) => *w = (*w & 0xffff_0000) | u32::from(v),
                    (2, Some(w)) => *w = (*w & 0xffff) | u32::from(v) << 16,
                    _ => {}
                }
                out.stores += u64::from(part == 2 && global);
            }
        }
        out.steps = m.steps;
        if flow.is_break() && !m.finished() {
            return Err(LaunchError::Stopped { steps: m.steps });
        }
    }
    Ok(out)
}

/// A step's record as its token; [`END`] once the launch has finished.
pub fn record_token(r: Option<StepRecord>) -> Token {
    r.map_or(END, |r| Token::Record { warp: r.warp as u32, block: r.block as u32, mask: r.mask })
}
