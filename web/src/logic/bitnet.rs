//! The BitNet LUT tab's model: a weight matrix and an activation vector, packed in one format,
//! its tables, the kernel's step-by-step trace and outputs beside an f32 reference. Everything
//! shown is computed by `kernels_wasm::bitnet`; this only arranges it for display.

use kernels_wasm::bitnet::backend::Backend;
use kernels_wasm::bitnet::i2s::{I2sLayout, I2sMatrix};
use kernels_wasm::bitnet::lut::PairTables;
use kernels_wasm::bitnet::lut_matrix::LutMatrix;
use kernels_wasm::bitnet::quant::{quantize_activations, QuantActs, Rounding, TernaryMatrix};
use kernels_wasm::bitnet::random::Rng;
use kernels_wasm::bitnet::tl1::Tl1Matrix;
use kernels_wasm::bitnet::tl2::{Tl2Matrix, Tl2Tables};
use kernels_wasm::bitnet::trace::{entry_weights, Lookup, StepKind, Trace};
use kernels_wasm::bitnet::BitnetError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Tl1,
    Tl2,
    I2s,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Tl1, Format::Tl2, Format::I2s];

    pub fn name(self) -> &'static str {
        match self {
            Format::Tl1 => "TL1",
            Format::Tl2 => "TL2",
            Format::I2s => "I2_S",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// Shapes (M×K) small enough to step through, then the seed's and the 125M layout's, to run.
pub const SHAPES: [(usize, usize); 9] =
    [(32, 128), (64, 256), (32, 224), (768, 768), (768, 3072), (3072, 768), (1536, 4096), (4096, 1536), (1536, 1536)];
/// A shape as links write it: `768x3072`.
pub fn shape_name(m: usize, k: usize) -> String {
    format!("{m}x{k}")
}

/// The shape of [`SHAPES`] that `name` ([`shape_name`]) names.
pub fn shape_of(name: &str) -> Option<(usize, usize)> {
    SHAPES.into_iter().find(|&(m, k)| shape_name(m, k) == name)
}

/// Above this many weights the tab does not record a trace (it would be millions of steps).
pub const MAX_STEP_WEIGHTS: usize = 64 * 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightSource {
    /// Uniformly random ternary weights.
    Ternary,
    /// Random f32 weights, quantised by absmean here.
    QuantisedF32,
}

impl WeightSource {
    /// The name in the tab's select and in links.
    pub fn name(self) -> &'static str {
        match self {
            WeightSource::Ternary => "ternary",
            WeightSource::QuantisedF32 => "f32",
        }
    }

    pub fn parse(s: &str) -> Option<WeightSource> {
        [WeightSource::Ternary, WeightSource::QuantisedF32].into_iter().find(|w| w.name() == s)
    }
}

/// A packed matrix with the tables (or quantised activations) its kernel reads.
pub enum Packed {
    Tl1(Tl1Matrix, PairTables),
    Tl2(Tl2Matrix, Tl2Tables),
    I2s(I2sMatrix),
}

pub struct Problem {
    pub format: Format,
    pub m: usize,
    pub k: usize,
    pub weights: TernaryMatrix,
    pub x: Vec<f32>,
    pub acts: QuantActs,
    pub packed: Packed,
    /// `None` for shapes above [`MAX_STEP_WEIGHTS`].
    pub trace: Option<Trace>,
    /// The scalar kernel's `y = W·x`, computed once for every view that shows it.
    pub output: Vec<f32>,
    /// The f32 reference: the same ternary weights and scale times the unquantised `x`, in f64.
    pub reference: Vec<f32>,
}

impl Problem {
    pub fn new(format: Format, m: usize, k: usize, source: WeightSource, seed: u64) -> Result<Problem, BitnetError> {
        let mut rng = Rng::new(seed);
        let weights = match source {
            WeightSource::Ternary => rng.ternary(m, k),
            WeightSource::QuantisedF32 => TernaryMatrix::quantize(m, k, &rng.f32s(m * k, 1.0))?,
        };
        let x = rng.f32s(k, 2.0);
        let acts = quantize_activations(&x, Rounding::HalfEven)?;
        let packed = match format {
            Format::Tl1 => Packed::Tl1(Tl1Matrix::pack(&weights)?, PairTables::from_quantized(&acts)?),
            Format::Tl2 => {
                let p = Tl2Matrix::pack(&weights)?;
                let tables = Tl2Tables::from_quantized(&acts, p.geometry.three_k)?;
                Packed::Tl2(p, tables)
            }
            Format::I2s => Packed::I2s(I2sMatrix::pack(&weights, I2sLayout::X86)?),
        };
        let trace = (m * k <= MAX_STEP_WEIGHTS).then(|| match &packed {
            Packed::Tl1(p, t) => Trace::tl1(p, t),
            Packed::Tl2(p, t) => Trace::tl2(p, t),
            Packed::I2s(p) => Trace::i2s(p, &acts.q),
        });
        let reference = reference(&weights, &x);
        let mut p = Problem { format, m, k, weights, x, acts, packed, trace, output: vec![0f32; m], reference };
        let mut output = vec![0f32; m];
        p.run(Backend::Scalar, &mut output)?;
        p.output = output;
        Ok(p)
    }

    /// `y = W·x` by the kernel on `backend`.
    pub fn run(&self, backend: Backend, out: &mut [f32]) -> Result<(), BitnetError> {
        match &self.packed {
            Packed::Tl1(p, t) => p.gemv(t, backend, out),
            Packed::Tl2(p, t) => p.gemv(t, backend, out),
            Packed::I2s(p) => p.gemv(&self.acts, backend, out),
        }
    }

    /// What a lookup's table is built from: an activation triplet (TL2 outside the tail) or pair.
    pub fn group_kind(&self, l: &Lookup) -> &'static str {
        if self.format == Format::Tl2 && !l.tail {
            "triplet"
        } else {
            "pair"
        }
    }

    /// The largest error activation quantisation can cause in row `r`: each int8 is within half
    /// a step (`0.5 / act_scale`) of `x·act_scale`, so `|y − ref| ≤ scale·Σ|w|·0.5/act_scale`.
    pub fn error_bound(&self, r: usize) -> f32 {
        let nonzero = self.weights.row(r).iter().filter(|&&w| w != 0).count() as f32;
        self.weights.scale * nonzero * 0.5 / self.acts.scale
    }

    /// Columns of the packed-index view: one per table group (pair or triplet), or per weight
    /// for I2_S.
    pub fn index_cols(&self) -> usize {
        match &self.packed {
            Packed::Tl1(..) => self.k / 2,
            Packed::Tl2(p, _) => p.geometry.three_k / 3 + p.geometry.two_k / 2,
            Packed::I2s(_) => self.k,
        }
    }

    /// The column of a lookup in the packed-index view.
    pub fn index_col(&self, l: &Lookup) -> usize {
        match &self.packed {
            Packed::Tl2(p, _) if l.tail => p.geometry.three_k / 3 + l.group,
            _ => l.group,
        }
    }

    /// The packed indices as the kernel reads them, row-major `M × index_cols()`: TL1 pair
    /// indices 0–8, TL2 signed triplet values (magnitude nibble, negative where the sign bit is
    /// set) then tail pair indices, I2_S 2-bit codes.
    pub fn index_grid(&self) -> Vec<f32> {
        let cols = self.index_cols();
        let mut grid = vec![0f32; self.m * cols];
        match (&self.packed, &self.trace) {
            (Packed::I2s(p), _) => {
                for (g, w) in grid.iter_mut().zip(&p.unpack().w) {
                    *g = (w + 1) as f32;
                }
            }
            (_, Some(trace)) => {
                for step in &trace.steps {
                    if let StepKind::Lookup { lookups, .. } = &step.kind {
                        for l in lookups {
                            let v = if l.negate { -(l.nibble as f32) } else { l.nibble as f32 };
                            grid[step.row * cols + self.index_col(l)] = v;
                        }
                    }
                }
            }
            _ => {}
        }
        grid
    }

    /// The 16 entries of table `group` (a TL2 tail pair table when `tail`).
    pub fn table(&self, group: usize, tail: bool) -> Vec<TableEntry> {
        let (triplet, base, width) = match &self.packed {
            Packed::Tl2(..) if !tail => (true, 3 * group, 3),
            Packed::Tl2(p, _) => (false, p.geometry.three_k + 2 * group, 2),
            _ => (false, 2 * group, 2),
        };
        let a = &self.acts.q[base..(base + width).min(self.k)];
        (0..16u8)
            .map(|e| {
                let value = match &self.packed {
                    Packed::Tl1(_, t) => t.entry(group, e),
                    Packed::Tl2(_, t) if triplet => t.triplet_entry(group, e),
                    Packed::Tl2(_, t) => t.pair_entry(group, e),
                    Packed::I2s(_) => 0,
                };
                let formula = entry_weights(triplet, e).map(|w| formula(&w, a));
                TableEntry { index: e, value, lo: value as u8, hi: (value >> 8) as u8, formula }
            })
            .collect()
    }
}

fn reference(weights: &TernaryMatrix, x: &[f32]) -> Vec<f32> {
    (0..weights.rows)
        .map(|r| {
            let dot: f64 = weights.row(r).iter().zip(x).map(|(&w, &v)| w as f64 * v as f64).sum();
            (dot * weights.scale as f64) as f32
        })
        .collect()
}

/// One table entry, as stored (split into low and high bytes) and as formed.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    pub index: u8,
    pub value: i16,
    pub lo: u8,
    pub hi: u8,
    /// `None`: unused index (no weight group maps to it; stored as 0).
    pub formula: Option<String>,
}

/// `"(+1)·(−12) + (0)·5 = −12"`.
pub fn formula(w: &[i8], a: &[i8]) -> String {
    let terms: Vec<String> = w.iter().zip(a).map(|(w, a)| format!("({w:+})·({a})")).collect();
    let sum: i32 = w.iter().zip(a).map(|(&w, &a)| w as i32 * a as i32).sum();
    format!("{} = {sum}", terms.join(" + ")).replace("(+0)", "(0)")
}

/// Milliseconds per call of `f`: calls are timed in batches of at least `min_batch_ms` (the
/// browser's clock is coarse, 0.1 ms without cross-origin isolation) and the median batch's
/// time per call is returned.
pub fn time_per_call(now: &mut dyn FnMut() -> f64, f: &mut dyn FnMut(), min_batch_ms: f64, batches: usize) -> f64 {
    f(); // warm-up: first-touch page faults and lazy compilation are not the kernel
    let mut per_call: Vec<f64> = (0..batches.max(1))
        .map(|_| {
            let (start, mut calls) = (now(), 0u32);
            loop {
                f();
                calls += 1;
                let elapsed = now() - start;
                if elapsed >= min_batch_ms || calls >= 1_000_000 {
                    break elapsed / calls as f64;
                }
            }
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_format_runs_and_matches_the_reference_within_its_bound() {
        for format in Format::ALL {
            for source in [WeightSource::Ternary, WeightSource::QuantisedF32] {
                let p = Problem::new(format, 64, 256, source, 7).unwrap();
                let mut y = vec![0f32; 64];
                p.run(Backend::Scalar, &mut y).unwrap();
                assert_eq!(y, p.output);
                for (r, (y, &reference)) in y.iter().zip(&p.reference).enumerate() {
                    assert!((y - reference).abs() <= p.error_bound(r) * 1.001 + 1e-5, "{format:?} row {r}");
                }
                // The trace ends at the kernel's accumulators.
                let trace = p.trace.as_ref().unwrap();
                let acc = trace.state_at(trace.steps.len()).acc;
                let from_acc: Vec<f32> = acc.iter().map(|&a| a as f32 / p.acts.scale * p.weights.scale).collect();
                assert_eq!(from_acc, y, "{format:?}");
            }
        }
    }

    #[test]
    fn link_names_read_back_and_others_are_refused() {
        for (m, k) in SHAPES {
            assert_eq!(shape_of(&shape_name(m, k)), Some((m, k)));
        }
        for w in [WeightSource::Ternary, WeightSource::QuantisedF32] {
            assert_eq!(WeightSource::parse(w.name()), Some(w));
        }
        assert_eq!(shape_of("768×768"), None);
        assert_eq!(shape_of("1x1"), None);
        assert_eq!(WeightSource::parse("F32"), None);
    }

    #[test]
    fn index_grid_and_tables_describe_the_weights() {
        let p = Problem::new(Format::Tl2, 32, 224, WeightSource::Ternary, 3).unwrap();
        assert_eq!(p.index_cols(), 192 / 3 + 32 / 2);
        let grid = p.index_grid();
        for r in 0..32 {
            for tr in 0..64 {
                let w = &p.weights.row(r)[3 * tr..3 * tr + 3];
                assert_eq!(grid[r * 80 + tr], (9 * w[0] + 3 * w[1] + w[2]) as f32, "row {r} triplet {tr}");
            }
        }
        let table = p.table(5, false);
        assert_eq!(table.len(), 16);
        assert!(table[14].formula.is_none() && table[15].formula.is_none());
        let a = &p.acts.q[15..18];
        assert_eq!(table[13].value, a.iter().map(|&v| v as i16).sum::<i16>()); // (1, 1, 1)
        assert_eq!(i16::from_le_bytes([table[13].lo, table[13].hi]), table[13].value);
        assert_eq!(p.table(0, true)[9].formula, None);
        assert_eq!(formula(&[1, 0, -1], &[-12, 5, 3]), "(+1)·(-12) + (0)·(5) + (-1)·(3) = -15");
    }

    #[test]
    fn batches_time_many_calls_against_a_coarse_clock() {
        // A fake clock that advances 0.25 ms per call of f and only reads in 0.1 ms steps.
        let t = std::cell::Cell::new(0.0f64);
        let mut now = || (t.get() * 10.0).floor() / 10.0;
        let mut f = || t.set(t.get() + 0.25);
        let ms = time_per_call(&mut now, &mut f, 20.0, 5);
        assert!((ms - 0.25).abs() < 0.01, "{ms}");
    }

    #[test]
    fn shapes_a_format_refuses_give_its_error() {
        let err = Problem::new(Format::I2s, 32, 224, WeightSource::Ternary, 1).err().unwrap();
        assert!(err.to_string().contains("multiple of 128"), "{err}");
        assert!(Problem::new(Format::Tl2, 32, 64, WeightSource::Ternary, 1).is_err());
        assert!(Problem::new(Format::Tl1, 1536, 4096, WeightSource::Ternary, 1).unwrap().trace.is_none());
    }
}
