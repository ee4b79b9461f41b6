//! The machine's state rows read back out of a spliced model's DeltaNet layers, for the tab:
//! the register file (`register_file`: a word per (warp, lane, register) as two rows of two
//! 8-bit limbs), each lane's PC (`pc_rows`) and global memory as the first load mixer holds it
//! (every load mixer is written alike, at each store token). A row that is not an exact limb row reads `None`: the exactness
//! argument says it cannot happen, so the tab shows it rather than hiding it.

use super::{Compiled, Runner, Splice, StreamNorms};
use crate::protocol::qwengpu::{MachineRows, RegisterRow};
use crate::qwengpu::deltanet::StateRows;
use crate::qwengpu::exec::load::memory_word;
use crate::qwengpu::interp::{Machine, StepRecord};
use crate::qwengpu::limbs::rms_norm;
use crate::qwengpu::register_file::sent;
use alloc::vec;
use alloc::vec::Vec;

/// The register file as a launch's steps sent it, which is what the register rows must hold: the
/// launch's values, then each step's live-out registers of the lanes that ran. A register no later
/// step reads is never sent (§3), so there the interpreter's value may differ from the rows'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentRegisters {
    live_out: Vec<u32>,
    /// `regs[warp][lane][r]`.
    pub regs: Vec<Vec<Vec<u32>>>,
}

impl SentRegisters {
    /// Before the first step of the launch `m` is about to run.
    pub fn new(m: &Machine) -> SentRegisters {
        SentRegisters { live_out: sent(&m.program), regs: m.warps.iter().map(|w| w.regs.clone()).collect() }
    }

    /// After `m` ran `step`.
    pub fn after(&mut self, step: &StepRecord, m: &Machine) {
        let (w, live_out) = (step.warp, self.live_out[step.block]);
        for lane in (0..m.spec.lanes).filter(|l| step.mask >> l & 1 == 1) {
            for reg in (0..m.spec.regs).filter(|r| live_out >> r & 1 == 1) {
                self.regs[w][lane][reg] = m.warps[w].regs[lane][reg];
            }
        }
    }
}

/// Which of the splice's compiled layers hold the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayers {
    /// The register file: the DeltaNet that writes the read head's channels.
    pub file: usize,
    /// The first global load mixer: of the DeltaNets that write a loaded word's channels,
    /// instruction 0's shuffle mixer comes first, then its load mixer.
    pub memory: usize,
    /// The PC rows (`pc_rows`): the DeltaNet that writes their read channels.
    pub pcs: usize,
}

impl Splice {
    /// The bias channel normed at a machine position: a machine token's row (every machine
    /// position's is the same, §2), normed by `norms`' machine weights.
    pub fn machine_bias(&self, norms: &StreamNorms) -> f32 {
        let mut x = vec![0.0f32; self.width];
        for &(c, v) in self.embed.first().map_or(&[][..], |r| &r[..]) {
            x[c] = v;
        }
        let order: Vec<usize> = (0..self.width).collect();
        rms_norm(&x, &norms.machine, norms.eps, &order)[self.bias]
    }

    pub fn row_layers(&self) -> RowLayers {
        let writes = |i: usize, channel: usize| matches!(&self.layers[i], Compiled::DeltaNet(w) if w.w_out.nonzero_rows().contains(&channel));
        let read = self.registers.read();
        let (_, loaded) = self.exec.load_layout();
        let file = (0..self.layers.len()).find(|&i| writes(i, read));
        let memory = (0..self.layers.len()).filter(|&i| writes(i, loaded)).nth(1);
        let pcs = (0..self.layers.len()).find(|&i| writes(i, self.pcs.read()));
        // All exist by construction (`Splice::new` pushes the file, every instruction's mixers
        // and the PC rows); a splice without them would not have built.
        let [file, memory, pcs] = [file, memory, pcs].map(|l| l.unwrap_or(usize::MAX));
        RowLayers { file, memory, pcs }
    }

    /// The rows of warps `0..warps` (registers `0..regs` and the PC of every lane, in thread
    /// blocks of `per_cta` warps) and global words `0..words` as `runner`'s states hold them;
    /// `None` for a runner that is not spliced.
    pub fn machine_rows(
        &self,
        runner: &Runner,
        warps: (usize, usize),
        regs: usize,
        words: usize,
    ) -> Option<MachineRows> {
        let at = self.row_layers();
        let nets = [runner.deltanet(at.file)?, runner.deltanet(at.memory)?, runner.deltanet(at.pcs)?];
        Some(self.rows_of(nets, warps, regs, words))
    }

    /// [`Self::machine_rows`] from the states of [`Self::row_layers`]' three DeltaNets (file,
    /// memory, PCs), wherever they ran (a GPU reads them back).
    pub fn rows_of(
        &self,
        [file, memory, pcs]: [&impl StateRows; 3],
        (warps, per_cta): (usize, usize),
        regs: usize,
        words: usize,
    ) -> MachineRows {
        let at = self.row_layers();
        let per_cta = per_cta.max(1);
        let lanes = self.registers.shape.lanes;
        let registers = (0..warps.min(self.registers.shape.warps))
            .flat_map(|warp| (0..lanes).map(move |lane| (warp, lane)))
            .map(|(warp, lane)| RegisterRow {
                warp: warp as u32,
                lane: lane as u32,
                values: (0..regs.min(self.registers.shape.regs))
                    .map(|r| self.registers.value(file, warp, lane, r))
                    .collect(),
                pc: self.pcs.pc_of(pcs, per_cta, warp, lane).map(u32::from),
            })
            .collect();
        let (layout, _) = self.exec.load_layout();
        let memory_rows: Vec<Option<u32>> = (0..words).map(|w| memory_word(memory, &layout, w)).collect();
        MachineRows {
            register_layer: at.file as u32,
            memory_layer: at.memory as u32,
            pc_layer: at.pcs as u32,
            registers,
            memory: memory_rows,
        }
    }
}
