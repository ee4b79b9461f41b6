//! Where a Gated DeltaNet's non-linear steps run ([`super::DeltaNet::watch`]): the machine's
//! encoding keeps every argument of SiLU, sigmoid, softplus, `exp` and the norms' `1/√` where the
//! result is exact whatever the last ulp of the functions they call, and this counts it.

/// Where a layer's non-linear steps ran (`DeltaNet::watch`): per kind of step, how many
/// arguments lay where the result is exact whatever the last ulp of `exp`, `ln`, `sqrt` and `÷`
/// (see [`Regime::exact`]), how many did not, and the first that did not. The machine's
/// encoding (`limb_memory`) keeps every argument in such a place; a WGSL or other port can
/// then compute these steps by their branches and keep the bits.
#[derive(Debug, Clone, Default)]
pub struct Regimes {
    pub exact: [u64; Regime::ALL.len()],
    pub other: [u64; Regime::ALL.len()],
    pub first_other: [Option<f32>; Regime::ALL.len()],
}

/// A cache of counts: layers in the same state are equal whatever they counted.
impl PartialEq for Regimes {
    fn eq(&self, _: &Regimes) -> bool {
        true
    }
}

/// The non-linear steps of [`DeltaNet::step`], by their argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// SiLU of a q/k/v channel (identity taps), and of a `z` channel: ±0, ≥ 32 (`x`) or ≤ −89
    /// (`−0`: `exp(89)` overflows).
    SiluQkv,
    SiluZ,
    /// `β = sigmoid(b)` where the head has a key (else `S += k ⊗ δ` adds nothing): ±0 (β = ½:
    /// `exp(0) = 1` in every libm), ≥ 17 (`exp(−17)` is below half an ulp of 1: β = 1) or ≤ −89
    /// (β = 0).
    Beta,
    /// `softplus(a + dt_bias)` where `exp(a_log)` is not 0: > 20 (itself) or ≤ −17 (`ln 1 = 0`);
    /// `a_log`: 0 (`exp` gives 1) or ≤ −110 (0); `g = −exp(a_log)·softplus`: ±0 (α = 1) or ≤ −110
    /// (α = 0).
    Softplus,
    ALog,
    Gate,
    /// A q or k head's `Σx²` before `+ 1e-6`: 0 (nothing hot), or a power of four that ε does not
    /// move (so `1/√` is an exact power of two).
    KeyNorm,
    /// RMSNormGated's `mean(o²) + ε`: the same, with `Σo² = 0` giving `o = 0` whatever the root.
    OutNorm,
}

impl Regime {
    pub const ALL: [Regime; 8] = [
        Regime::SiluQkv,
        Regime::SiluZ,
        Regime::Beta,
        Regime::Softplus,
        Regime::ALog,
        Regime::Gate,
        Regime::KeyNorm,
        Regime::OutNorm,
    ];

    /// Whether the step's result at `x` is exact whatever the last ulp of the functions it calls.
    pub fn exact(self, x: f32) -> bool {
        let power_of_four = |x: f32| x > 0.0 && x.to_bits() & 0x7f_ffff == 0 && (x.to_bits() >> 23) % 2 == 1;
        match self {
            Regime::SiluQkv | Regime::SiluZ => x == 0.0 || x >= 32.0 || x <= -89.0,
            Regime::Beta => x == 0.0 || x >= 17.0 || x <= -89.0,
            Regime::Softplus => x > 20.0 || x <= -17.0,
            Regime::ALog | Regime::Gate => x == 0.0 || x <= -110.0,
            Regime::KeyNorm => x == 0.0 || (power_of_four(x) && x + 1e-6 == x),
            Regime::OutNorm => power_of_four(x),
        }
    }
}

impl Regimes {
    pub(super) fn count(&mut self, seen: &[(Regime, f32)]) {
        for &(r, x) in seen {
            let i = r as usize;
            if r.exact(x) {
                self.exact[i] += 1;
            } else {
                self.other[i] += 1;
                self.first_other[i].get_or_insert(x);
            }
        }
    }
}
