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
    machine: (MachineSpec, &Program),
    memory: &[u32],
    launch: &Launch,
    max_steps: u64,
    mut fed: impl FnMut(Fed, &Runner) -> ControlFlow<()>,
) -> Result<Launched, LaunchError> {
    let (mut check, prompt) = Lockstep::new(splice, machine, memory, launch, max_steps)?;
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
    loop {
        // The model names the next token, and the interpreter beside it must have the same.
        let f = check.take(splice.machine_token(argmax(&logits) as usize))?;
        logits = runner.forward(splice.token_id(f.token))?;
        let flow = fed(f, runner);
        if check.ended() {
            // A stop asked at the launch's end record changes nothing.
            return Ok(check.launched);
        }
        if f.ends_step && flow.is_break() && !check.machine.finished() {
            return Err(LaunchError::Stopped { steps: f.steps });
        }
    }
}

/// The interpreter beside a model that generates a launch: it gives the prompt, then checks each
/// token the model chose against its own, one at a time, and keeps global memory as the model's
/// store tokens write it. The CPU's launch ([`launch`]) and the GPU's (`gpu::machine`) both
/// answer to it.
pub struct Lockstep<'p> {
    pub machine: Machine,
    program: &'p Program,
    /// Per block, the live-out registers a step of it sends.
    sent: Vec<u32>,
    /// The current step, the tokens it is due (its record first) and how many were taken.
    step: StepRecord,
    want: Vec<Token>,
    taken: usize,
    max_steps: u64,
    ended: bool,
    /// The global word the current store writes (its index token came first).
    index: usize,
    pub launched: Launched,
}

impl<'p> Lockstep<'p> {
    /// The interpreter for `program` with `memory` and `launch`, and the prompt that feeds them
    /// to the model.
    pub fn new(
        splice: &Splice,
        (spec, program): (MachineSpec, &'p Program),
        memory: &[u32],
        launch: &Launch,
        max_steps: u64,
    ) -> Result<(Self, Vec<Token>), LaunchError> {
        let machine = Machine::new(spec, program.clone(), memory, launch.clone())?;
        let prompt = splice.registers.prompt_tokens(program, launch, memory)?;
        let n = prompt.len() as u64;
        let launched =
            Launched { global: machine.global.clone(), steps: 0, tokens: n, prompt: n, chosen: 0, stores: 0 };
        let step = StepRecord { warp: 0, block: 0, mask: 0 };
        let sent = register_file::sent(program);
        let (want, taken, ended, index) = (Vec::new(), 0, false, 0);
        Ok((Lockstep { machine, program, sent, step, want, taken, max_steps, ended, index, launched }, prompt))
    }

    /// Whether the launch's end record was taken: nothing more is due.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Checks the token the model chose (`None`: not a machine token) against the
    /// interpreter's, and steps the interpreter at each record.
    pub fn take(&mut self, got: Option<Token>) -> Result<Fed, LaunchError> {
        let m = &mut self.machine;
        if self.taken < self.want.len() {
            let (i, want, step) = (self.taken, self.want[self.taken], self.step);
            let Some(Token::Val(v)) = got.filter(|&g| g == want) else {
                let (step, warp, block) = (m.steps - 1, step.warp, step.block);
                return Err(LaunchError::Diverged { step, warp, block, token: i, got, want });
            };
            self.taken += 1;
            self.store(i, v);
            return Ok(self.fed(Token::Val(v)));
        }
        if self.ended || (m.steps >= self.max_steps && !m.finished()) {
            return Err(MachineError::StepLimit(self.max_steps).into());
        }
        // After the prompt the first record; after the last step, `END`.
        let next = m.next_record();
        let record = record_token(next);
        if got != Some(record) {
            let at = next.unwrap_or(self.step);
            let (step, warp, block) = (m.steps, at.warp, at.block);
            return Err(LaunchError::Diverged { step, warp, block, token: 0, got, want: record });
        }
        let Some(_) = next else {
            self.ended = true;
            return Ok(self.fed(record));
        };
        let (step, stored) = m.step_stored()?.ok_or(MachineError::StepLimit(m.steps))?;
        let live_out = self.sent[step.block];
        self.want = RegisterFile::step_tokens(&step, live_out, &m.warps[step.warp].regs, &stored);
        (self.step, self.taken) = (step, 1);
        Ok(self.fed(record))
    }

    /// A chosen token taken: counted, and whether it ends its step.
    fn fed(&mut self, token: Token) -> Fed {
        let out = &mut self.launched;
        (out.tokens, out.chosen) = (out.tokens + 1, out.chosen + 1);
        let ends_step = !self.ended && self.taken == self.want.len();
        if ends_step {
            out.steps = self.machine.steps;
        }
        Fed { token, chosen: true, steps: self.machine.steps, tokens: out.tokens, ends_step }
    }

    /// VAL token `i` of the step, `v`: where it is a store's, it writes the host's copy of
    /// global memory.
    fn store(&mut self, i: usize, v: u16) {
        // A lane's slots: two per live-out register, then three per store (index, low, high).
        let regs = 2 * self.sent[self.step.block].count_ones() as usize;
        let spaces = store_slots(&self.program.blocks[self.step.block]);
        let slot = (i - 1) % (regs + 3 * spaces.len());
        if slot < regs {
            return;
        }
        let (k, part) = ((slot - regs) / 3, (slot - regs) % 3);
        let global = !spaces[k].1;
        let out = &mut self.launched;
        let word = out.global.get_mut(self.index).filter(|_| global);
        match (part, word) {
            (0, _) => self.index = v as usize,
            (1, Some(w)) => *w = (*w & 0xffff_0000) | u32::from(v),
            (2, Some(w)) => *w = (*w & 0xffff) | u32::from(v) << 16,
            _ => {}
        }
        out.stores += u64::from(part == 2 && global);
    }
}

/// A step's record as its token; [`END`] once the launch has finished.
pub fn record_token(r: Option<StepRecord>) -> Token {
    r.map_or(END, |r| Token::Record { warp: r.warp as u32, block: r.block as u32, mask: r.mask })
}
