//! A kernel launched on the second machine on the GPU, in lockstep with the interpreter
//! (`splice::launch::Lockstep`): the host feeds the prompt's ids, the GPU runs position after
//! position on the ids its own argmax chose, and each chosen id read back is checked against the
//! interpreter's token, in order. The arrays come from the store tokens the model chose.

use super::machine::GpuMachine;
use super::{Gpu, GpuError};
use crate::qwengpu::interp::Launch;
use crate::qwengpu::isa::{MachineSpec, Program};
use crate::qwengpu::splice::launch::{Fed, LaunchError, Launched, Lockstep};
use crate::qwengpu::splice::Splice;
use alloc::vec::Vec;
use core::ops::ControlFlow;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuLaunchError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The machine's positions ran out before the model chose the launch's end. How many the
    /// launch needs is not known until it ends (the steps are the model's).
    #[error(
        "the machine's {capacity} positions ran out after the launch's {prompt}-token prompt and {steps} steps, \
         before the model chose its end: build the machine with room for more positions"
    )]
    OutOfRoom { capacity: usize, prompt: u64, steps: u64 },
}

/// Runs `program` with `memory` and `launch` on `machine` (built from `splice`) at its position,
/// at most `max_steps` steps; `fed` hears of every token the model chose.
pub async fn launch(
    (gpu, machine): (&Gpu, &mut GpuMachine),
    splice: &Splice,
    program: (MachineSpec, &Program),
    memory: &[u32],
    launch: &Launch,
    max_steps: u64,
    mut fed: impl FnMut(&Fed),
) -> Result<Launched, GpuLaunchError> {
    let (mut check, prompt) = Lockstep::new(splice, program, memory, launch, max_steps)?;
    let vocab = splice.text.vocab;
    let ids: Vec<usize> = prompt.iter().map(|&t| splice.token_id(t) - vocab).collect();
    let mut failed = None;
    let room = machine.capacity().saturating_sub(machine.position() + ids.len() + 1);
    let ran = machine
        .run(gpu, &ids, room, |id| match check.take(id.and_then(|id| splice.machine_token(vocab + id))) {
            Ok(f) => {
                fed(&f);
                ControlFlow::Continue(())
            }
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        })
        .await?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if !ran.ended || !check.ended() {
        let (prompt, steps) = (check.launched.prompt, check.launched.steps);
        return Err(GpuLaunchError::OutOfRoom { capacity: machine.capacity(), prompt, steps });
    }
    Ok(check.launched)
}
