//! A DeltaNet's state as the machine's decoders read it, wherever it is held.

use super::{DeltaNet, DeltaNetWeights};

/// Row `i` of head `h` of a DeltaNet's state (`d_v` values): what the machine's decoders read
/// (`limb_memory::word`, `RegisterFile::value`, `PcRows::pc_of`, …), from a layer's own state
/// or from one a GPU read back, without a layer built around it.
pub trait StateRows {
    fn row(&self, h: usize, i: usize) -> &[f32];
}

impl StateRows for DeltaNet {
    fn row(&self, h: usize, i: usize) -> &[f32] {
        DeltaNet::row(self, h, i)
    }
}

/// A DeltaNet's state held apart from its layer: `heads × d_k` rows of `d_v` values.
#[derive(Debug, Clone, Copy)]
pub struct State<'a> {
    values: &'a [f32],
    d_k: usize,
    d_v: usize,
}

impl<'a> State<'a> {
    /// `values` as the state of a layer shaped `w`; `None` if their count is not that state's.
    pub fn of(values: &'a [f32], w: &DeltaNetWeights) -> Option<State<'a>> {
        (values.len() == w.heads * w.d_k * w.d_v).then_some(State { values, d_k: w.d_k, d_v: w.d_v })
    }
}

impl StateRows for State<'_> {
    fn row(&self, h: usize, i: usize) -> &[f32] {
        &self.values[(h * self.d_k + i) * self.d_v..][..self.d_v]
    }
}
