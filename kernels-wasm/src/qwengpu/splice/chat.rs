//! A conversation with the spliced model (`native-host qwengpu chat`,
//! `docs/qwengpu-second-machine.md` §20): one context, one KV cache and one set of DeltaNet
//! states for the whole conversation. The host feeds the turns' text and each launch's prompt;
//! the model's argmax over its whole vocabulary picks every other token, the launches' records
//! and VAL tokens and the text of its replies, and each is fed back as the next input.
//!
//! A text position attends to text positions only, and only text tokens take RoPE positions
//! ([`Runner`]), so the conversation's text runs exactly as the plain text model runs the same
//! text with the launches left out. The text layers therefore cannot read the arrays out of the
//! VAL tokens the model chose: the host reads them and writes them into the reply as text, which
//! the model then goes on from.

use super::drift::CHUNK;
use super::launch::{launch, Fed, LaunchError, Launched};
use super::{Runner, Splice, SpliceError};
use crate::bitnet::model::sample::greedy as argmax;
use crate::protocol::qwengpu::MachineRows;
use crate::qwengpu::interp::Launch;
use crate::qwengpu::isa::{MachineSpec, Program};
use alloc::vec::Vec;
use core::ops::ControlFlow;

pub use crate::protocol::qwengpu::By;

/// A conversation: the runner, and every token fed to it so far.
pub struct Chat<'a> {
    runner: Runner<'a>,
    splice: &'a Splice,
    /// Every token id in the context, in order, and who chose it.
    pub context: Vec<(usize, By)>,
    /// The logits after the last token, where the last feed kept them.
    logits: Option<Vec<f32>>,
}

impl<'a> Chat<'a> {
    /// A conversation in `runner` (spliced with `splice`), from its current position on.
    pub fn new(runner: Runner<'a>, splice: &'a Splice) -> Self {
        Chat { runner, splice, context: Vec::new(), logits: None }
    }

    /// Feeds the host's `ids` (a turn's text, the reply's opening), [`CHUNK`] positions at a
    /// time (the same bits as one by one, each weight row read once a chunk).
    pub fn feed(&mut self, ids: &[usize]) -> Result<(), SpliceError> {
        for chunk in ids.chunks(CHUNK) {
            self.logits = Some(self.runner.forward_last(chunk)?);
            self.context.extend(chunk.iter().map(|&id| (id, By::Host)));
        }
        Ok(())
    }

    /// Greedy decoding: the model's argmax over its whole vocabulary, fed back, until it picks a
    /// token of `stop` (fed too, and returned last) or `max` tokens; `each` hears of every one,
    /// and ends the reply there where it answers [`ControlFlow::Break`].
    pub fn generate(
        &mut self,
        max: usize,
        stop: &[usize],
        mut each: impl FnMut(usize) -> ControlFlow<()>,
    ) -> Result<Vec<usize>, ChatError> {
        let mut out = Vec::new();
        while out.len() < max {
            let logits = self.logits.take().ok_or(ChatError::NothingFed)?;
            let id = argmax(&logits) as usize;
            self.logits = Some(self.runner.forward(id)?);
            self.context.push((id, By::Model));
            out.push(id);
            if each(id).is_break() || stop.contains(&id) {
                break;
            }
        }
        Ok(out)
    }

    /// Launches `program` (on `spec`, the machine the splice holds) at this point of the
    /// conversation: the host feeds the prompt, the model picks every record and VAL token
    /// ([`launch`]). `fed` hears of every token. After a launch the host feeds text before
    /// [`Self::generate`] (the model goes on from the host's reading of the arrays).
    pub fn launch(
        &mut self,
        (spec, program): (MachineSpec, &Program),
        memory: &[u32],
        launch_of: &Launch,
        max_steps: u64,
        mut fed: impl FnMut(Fed) -> ControlFlow<()>,
    ) -> Result<Launched, ChatError> {
        self.logits = None;
        let (splice, context) = (self.splice, &mut self.context);
        let out = launch(&mut self.runner, splice, (spec, program), memory, launch_of, max_steps, |f| {
            context.push((splice.token_id(f.token), if f.chosen { By::Model } else { By::Host }));
            fed(f)
        });
        Ok(out?)
    }
}

impl<'a> Chat<'a> {
    /// The splice the conversation runs on: its vocabulary names the machine's tokens.
    pub fn splice(&self) -> &'a Splice {
        self.splice
    }

    /// The machine's state rows as the spliced model's DeltaNet layers hold them now (warps
    /// `0..warps` in thread blocks of `per_cta`, registers `0..regs`, global words `0..words`).
    pub fn rows(&self, warps: (usize, usize), regs: usize, words: usize) -> Option<MachineRows> {
        self.splice.machine_rows(&self.runner, warps, regs, words)
    }

    /// The compiled layers in front of the text model's, and the vocabulary (text tokens first).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.splice.layers.len(), self.splice.text.vocab, self.splice.vocab_size())
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatError {
    #[error(transparent)]
    Splice(#[from] SpliceError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("nothing to go on from: feed the host's text after a launch, before the model generates")]
    NothingFed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwen3::model::Model;
    use crate::qwengpu::next_record::END;
    use crate::qwengpu::sequencer::EXITED;
    use crate::qwengpu::splice::TINY_TEXT;
    use crate::qwengpu::suite;

    fn go<T>(_: T) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    /// Text, a launch, the host's text, then the model's reply: every VAL token is the model's
    /// (and the arrays the suite's), and the reply is what a fresh runner fed the same context
    /// generates, token for token, and what the plain text model generates from the text alone.
    #[test]
    fn a_conversation_goes_on_from_its_own_context() {
        let c = TINY_TEXT;
        let model = Model::random_float(c, 3);
        let splice = Splice::new(c).unwrap();
        let mut chat = Chat::new(Runner::spliced(c, &model, &splice).unwrap(), &splice);
        assert_eq!(chat.generate(4, &[], go), Err(ChatError::NothingFed));
        chat.feed(&[5, 17, 300]).unwrap();
        let first = chat.generate(3, &[], go).unwrap();
        let name = if cfg!(target_arch = "wasm32") { "warp_broadcast" } else { "reverse" };
        let k = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
        let spec = MachineSpec::second();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        // A launch stopped at the end of its third step; the next launch's reset record clears
        // what it left in the rows.
        let stop = |f: Fed| if f.steps >= 3 { ControlFlow::Break(()) } else { go(0) };
        let stopped = chat.launch((spec, &kernel.program), &p.memory, &p.launch, 10_000, stop);
        assert_eq!(stopped, Err(ChatError::Launch(LaunchError::Stopped { steps: 3 })));
        let before = chat.context.len();
        let out = chat.launch((spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| go(0)).unwrap();
        assert_eq!(p.read_arrays(&out.global), k.expected(&p), "{name}");
        // The load mixer's rows hold global memory as the launch left it; the register rows are
        // there for every warp the launch ran.
        let per_cta = p.launch.block.div_ceil(spec.lanes);
        let rows = chat.rows((p.launch.grid * per_cta, per_cta), spec.regs, out.global.len()).unwrap();
        assert_eq!(rows.memory, out.global.iter().map(|&w| Some(w)).collect::<Vec<_>>());
        assert_eq!(rows.registers.len(), p.launch.grid * p.launch.block / spec.lanes * spec.lanes);
        assert!(rows.registers.iter().all(|r| r.values.len() == spec.regs && r.values.iter().all(Option::is_some)));
        assert!(rows.registers.iter().any(|r| r.values.iter().any(|&v| v != Some(0))));
        // Every lane of the launch has exited, as the PC rows the model read its records from say.
        assert!(rows.registers.iter().all(|r| r.pc == Some(u32::from(EXITED))), "{:?}", rows.registers);
        let launched = &chat.context[before..];
        assert_eq!(launched.len() as u64, out.tokens);
        let chosen = launched.iter().filter(|(_, by)| *by == By::Model).count() as u64;
        assert!(chosen == out.chosen && chosen > 20, "{chosen} of {out:?}");
        // The host fed the prompt; the model chose every record and VAL token after it, and the end.
        let prompt = out.prompt as usize;
        assert!(launched[..prompt].iter().all(|&(_, by)| by == By::Host));
        assert!(launched[prompt..].iter().all(|&(_, by)| by == By::Model));
        assert_eq!(launched.last().and_then(|&(id, _)| splice.machine_token(id)), Some(END));
        chat.feed(&[42, 7]).unwrap();
        let start = chat.context.len();
        let reply = chat.generate(6, &[], go).unwrap();
        assert!(first.iter().chain(&reply).all(|&id| id < c.vocab), "text positions chose a machine token");

        // A fresh spliced runner fed the whole context, and the plain text model fed its text
        // alone (text positions attend to text positions only, at text-only RoPE positions).
        let ids: Vec<usize> = chat.context[..start].iter().map(|&(id, _)| id).collect();
        let text: Vec<usize> = ids.iter().copied().filter(|&id| id < c.vocab).collect();
        assert!(text.len() + 500 < ids.len());
        for (mut fresh, ids) in
            [(Runner::spliced(c, &model, &splice).unwrap(), ids), (Runner::plain(c, &model).unwrap(), text)]
        {
            let mut logits = fresh.forward_many(&ids).unwrap().pop().unwrap();
            for (i, &want) in reply.iter().enumerate() {
                let got = argmax(&logits) as usize;
                assert_eq!(got, want, "reply token {i}");
                logits = fresh.forward(got).unwrap();
            }
        }
    }
}
