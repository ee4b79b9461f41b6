//! The second machine's state rows (issue #22, `docs/qwengpu-second-machine.md` §4): words as
//! plain 8-bit limbs in the rows of a Gated DeltaNet layer (`deltanet`, Qwen3.5's arithmetic,
//! nothing specialised), written and read exactly in f32. This is where registers (and memory)
//! live between tokens: a VAL token's embedding names a row and carries its limbs, a later
//! position's query reads them back into the stream's limb channels.
//!
//! The input is the stream after its bias-channel RMSNorm (`limbs`): channel `one` is 1, address
//! channels are 0/1, limb channels integers in 0..256.
//!
//! **Addresses are an AND of one-hot groups** (say thread × register), so the stream holds a
//! few dozen address channels while the state has a row for every combination. Key `i`'s
//! pre-activation is `M·(number of groups whose hot channel is i's) − (G − 1)·M`: `M` where all
//! `G` groups match, 0 where one does not, at most `−M` otherwise. SiLU keeps `M` (`sigmoid(M)`
//! rounds to 1) and sends 0 and `−M` to ±0 (`sigmoid(−4096)` underflows), so the key is `M·e_i`
//! exactly; without an address every entry is ±0. Then, as in the first design's `memory`:
//! the L2 norm gives `e_i` (`M² = 2^24`, ε lost), `β = 1` and `α = 1`, and the delta rule
//! replaces row `i` by the value and leaves every other row (`k = ±0`) as it was. Queries are
//! the same AND over the read groups, `e_i / √d_k` after the norm, a power of two.
//!
//! **Values and the output norm.** A row is `[B, l_0 + 32, …, l_{L−1} + 32, 0, …]`: SiLU is the
//! identity on `B = 2^24` and on `l + 32 ≥ 32` (`sigmoid` rounds to 1 from 17 on), so the value
//! the layer stores is exactly that. Reading row `i` gives `o = row / √d_k`. RMSNormGated divides
//! by `√(mean(o²) + ε)`: the limbs add at most `L·287²` to `B²`, below half an ulp of `B²`
//! (2^24) in any order, so the root is exactly `B/√(d_k·d_v)`, a power of two when `d_k·d_v` is a
//! power of four. A norm scale of `2^24/(32·√d_v)` and `silu(z) = 32` make each output channel
//! the row's entry again, and `out_proj` takes `o_j − 32·o_0/B`: the limbs, or 0 for a row never
//! written (all zero: `0 · rsqrt(ε) = 0`) and for a position that reads nothing.
//!
//! A layer has one head per read a position makes. Each head has its own write address, read
//! address and conditions (channels that must be 1), so heads can hold the same rows (a register
//! file read several times a position) or different ones (word `k` of every ROM block). An
//! address digit can also be fixed (`Digit::Fixed`): a head that always reads word 3.

use super::deltanet::{DeltaNet, DeltaNetWeights, Matrix, StateRows};
use super::memory::exact_weights_sized;
use alloc::vec;
use alloc::vec::Vec;

/// The magnitude of a hot key or query pre-activation.
const M: f32 = 4096.0;
/// The value's bias entry.
const B: f32 = 16_777_216.0;
/// The offset that puts a limb where SiLU is the identity.
const OFFSET: f32 = 32.0;

/// The shape of a memory and where its inputs sit in the (normed) stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Sizes of the address's one-hot groups; a row is one combination.
    pub groups: Vec<usize>,
    /// Stream width, and its constant channel (1 after the norm).
    pub d_model: usize,
    pub one: usize,
    /// The channel of each limb written (a row holds `value.len()` limbs; `one` among them
    /// stores a constant 1, a "this row is set" flag).
    pub value: Vec<usize>,
    /// One read each.
    pub heads: Vec<Head>,
}

/// One head: where it writes and reads, and where its read goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// The write address, a digit per group, and channels that must all be 1 for the write.
    pub write: Vec<Digit>,
    pub write_when: Vec<usize>,
    /// The same for the read.
    pub read: Vec<Digit>,
    pub read_when: Vec<usize>,
    /// The first of the channels the read's limbs are added to.
    pub out: usize,
}

impl Head {
    /// A head that writes at the stream's one-hot groups from `write` whenever every channel of
    /// `write_when` is 1, and reads `read` into `out` (with no read condition).
    pub fn new(write: &[usize], write_when: &[usize], read: Vec<Digit>, out: usize) -> Head {
        let write = write.iter().map(|&s| Digit::Stream(s)).collect();
        Head { write, write_when: write_when.to_vec(), read, read_when: Vec::new(), out }
    }
}

/// Where an address takes a group's digit from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digit {
    /// The group's one-hot channels, from this one.
    Stream(usize),
    /// Always this digit (a head that holds, say, word 3 of whatever block the stream names).
    Fixed(usize),
}

impl Layout {
    /// Limbs per row.
    pub fn limbs(&self) -> usize {
        self.value.len()
    }

    /// Rows addressed: the product of the group sizes.
    pub fn rows(&self) -> usize {
        self.groups.iter().product()
    }

    /// The state's key width: the rows rounded up to a power of four (so `1/√d_k` is a power of
    /// two).
    pub fn d_k(&self) -> usize {
        power_of_four(self.rows())
    }

    /// The value width: the bias entry and the limbs, rounded up to a power of four.
    pub fn d_v(&self) -> usize {
        power_of_four(self.limbs() + 1)
    }

    /// Row `i`'s index in each group (the first group varies slowest).
    fn digits(&self, mut i: usize) -> Vec<usize> {
        let mut d = vec![0; self.groups.len()];
        for (g, size) in self.groups.iter().enumerate().rev() {
            d[g] = i % size;
            i /= size;
        }
        d
    }

    /// The row of an address given group by group.
    pub fn row(&self, address: &[usize]) -> usize {
        address.iter().zip(&self.groups).fold(0, |acc, (&a, &size)| acc * size + a)
    }
}

fn power_of_four(n: usize) -> usize {
    let mut p = 1;
    while p < n {
        p *= 4;
    }
    p
}

/// The layer's weights for `layout`.
pub fn weights(layout: &Layout) -> DeltaNetWeights {
    let (d, one, heads) = (layout.d_model, layout.one, layout.heads.len());
    let (dk, dv, g) = (layout.d_k(), layout.d_v(), layout.groups.len());
    let channels = heads * (2 * dk + dv);
    let mut w_qkv = Matrix::zeros(channels, d);
    // Key or query row `i` (`row` of the projection): `M` per group whose digit matches and per
    // condition channel, less `(terms − 1)·M`. A fixed digit that matches is a constant `M`
    // (from `one`); a row whose fixed digit does not match can reach 0 at most, so it never
    // fires.
    let mut and = |row: usize, address: &[Digit], when: &[usize], i: usize| {
        if i < layout.rows() {
            let mut constant = -((g + when.len()) as f32 - 1.0) * M;
            for (&a, digit) in address.iter().zip(layout.digits(i)) {
                match a {
                    Digit::Stream(s) => w_qkv.set(row, s + digit, M),
                    Digit::Fixed(f) => constant += if f == digit { M } else { 0.0 },
                }
            }
            for &c in when {
                w_qkv.set(row, c, M);
            }
            w_qkv.set(row, one, constant);
        }
    };
    // Rows in increasing order (every query, then every key): each entry lands at the end of
    // its column.
    for (h, head) in layout.heads.iter().enumerate() {
        (0..dk).for_each(|i| and(h * dk + i, &head.read, &head.read_when, i));
    }
    for (h, head) in layout.heads.iter().enumerate() {
        (0..dk).for_each(|i| and((heads + h) * dk + i, &head.write, &head.write_when, i));
    }
    for h in 0..heads {
        let v = 2 * heads * dk + h * dv;
        w_qkv.set(v, one, B);
        for (j, &c) in layout.value.iter().enumerate() {
            w_qkv.set(v + 1 + j, one, OFFSET);
            w_qkv.set(v + 1 + j, c, w_qkv.get(v + 1 + j, c) + 1.0);
        }
    }
    // Head h's limb j: o_j − 32·o_0/B (powers of two: exact).
    let mut w_out = Matrix::zeros(d, heads * dv);
    for (h, first) in layout.heads.iter().map(|head| head.out).enumerate() {
        for j in 0..layout.limbs() {
            w_out.set(first + j, h * dv + 1 + j, 1.0);
            w_out.set(first + j, h * dv, -OFFSET / B);
        }
    }
    let norm = B / (OFFSET * (dv as f32).sqrt());
    exact_weights_sized(d, one, (heads, dk, dv), norm, w_qkv, w_out)
}

/// A 32-bit word kept as two 16-bit halves of two limbs each, in head 0's rows `rows[0]` (low)
/// and `rows[1]` (high): 0 for a half never written, `None` for a row that is not exact.
pub fn word(net: &impl StateRows, layout: &Layout, rows: [usize; 2]) -> Option<u32> {
    rows.iter().enumerate().try_fold(0u32, |word, (half, &row)| {
        if net.row(0, row).iter().all(|&v| v == 0.0) {
            return Some(word);
        }
        let limbs = row_limbs(net, layout, 0, row)?;
        Some(word | (limbs[0] | limbs[1] << 8) << (16 * half))
    })
}

/// `w` (a `limb_memory` layer) that forgets every row of every head where channel `flag` is 1,
/// before that position's write: shared memory starts from zeros at each launch. The decay gate
/// `α = exp(−exp(a_log) · softplus(a + dt_bias))` with `a_log = 0` and `dt_bias = −200` is
/// exactly 1 where `a = 0` (`exp(−200)` underflows, so softplus gives `ln 1 = 0`), and with
/// `a = 400 · flag` exactly 0 where the flag is set (`exp(−200)` again): `S ← α·S` keeps every row
/// bit for bit or zeroes it (a row of ±0 reads as unwritten).
pub fn cleared_at(mut w: DeltaNetWeights, flag: usize) -> DeltaNetWeights {
    for h in 0..w.heads {
        w.a_log[h] = 0.0;
        w.dt_bias[h] = -200.0;
        w.w_a.set(h, flag, 400.0);
    }
    w
}

/// A memory layer for `layout`, every row unwritten.
pub fn layer(layout: &Layout) -> DeltaNet {
    DeltaNet::new(weights(layout))
}

/// The limbs row `i` holds in head `h` (`None` for a row never written, or one that does not
/// hold `[B, limbs + 32, 0…]` exactly).
pub fn row_limbs(net: &impl StateRows, layout: &Layout, h: usize, i: usize) -> Option<Vec<u32>> {
    let row = net.row(h, i);
    let limbs: Vec<f32> = row[1..=layout.limbs()].iter().map(|&v| v - OFFSET).collect();
    let clean = row[0] == B && row[1 + layout.limbs()..].iter().all(|&v| v == 0.0);
    (clean && limbs.iter().all(|&l| (0.0..256.0).contains(&l) && l.fract() == 0.0))
        .then(|| limbs.iter().map(|&l| l as u32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::limbs::{bias, norm_weights, rms_norm};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The register head 2 always reads.
    const FIXED: usize = 7;

    /// A register file: 16 threads × 15 registers, four limbs a row, three reads a position (the
    /// third of register [`FIXED`] of the thread the stream names), on a stream of 256 channels
    /// (bias channel 0).
    fn registers() -> Layout {
        let (threads, regs) = (16, 15);
        let group = threads + regs;
        let reg = |h: usize| if h == 2 { Digit::Fixed(FIXED) } else { Digit::Stream(5 + group + h * group + threads) };
        let read = |h: usize| vec![Digit::Stream(5 + group + h * group), reg(h)];
        Layout {
            groups: vec![threads, regs],
            d_model: 256,
            one: 0,
            value: (1 + group..5 + group).collect(),
            heads: (0..3).map(|h| Head::new(&[1, 1 + threads], &[], read(h), 5 + 4 * group + 4 * h)).collect(),
        }
    }

    /// The stream at a position, before its norm: the bias, the write's address and limbs, each
    /// head's read address.
    fn stream(l: &Layout, write: Option<(&[usize], [u32; 4])>, reads: &[Option<Vec<usize>>]) -> Vec<f32> {
        let mut x = vec![0.0; l.d_model];
        x[l.one] = bias(l.d_model);
        if let Some((address, limbs)) = write {
            for (s, &a) in l.heads[0].write.iter().zip(address) {
                if let Digit::Stream(s) = s {
                    x[s + a] = 1.0;
                }
            }
            for (&c, v) in l.value.iter().zip(limbs) {
                x[c] = v as f32;
            }
        }
        for (starts, read) in l.heads.iter().map(|h| &h.read).zip(reads) {
            if let Some(address) = read {
                for (s, &a) in starts.iter().zip(address) {
                    if let Digit::Stream(s) = s {
                        x[s + a] = 1.0;
                    }
                }
            }
        }
        x
    }

    /// A layer cleared at a flag keeps its rows bit for bit until the flag, forgets all of them
    /// there (the position's own write lands after), and then holds words as before.
    #[test]
    fn a_cleared_layer_forgets_every_row_at_its_flag_and_only_there() {
        let (l, flag) = (registers(), 255);
        let mut net = DeltaNet::new(cleared_at(weights(&l), flag));
        let mut plain: Vec<Option<[u32; 4]>> = vec![None; l.rows()];
        let mut rng = Rng::new(8);
        let order: Vec<usize> = (0..l.d_model).collect();
        for step in 0..120 {
            let address = vec![(rng.next_u64() % 16) as usize, (rng.next_u64() % 15) as usize];
            let limbs: [u32; 4] = core::array::from_fn(|_| (rng.next_u64() % 256) as u32);
            let clear = step % 40 == 39;
            let mut x = stream(&l, Some((&address, limbs)), &[None, None, None]);
            x[flag] = f32::from(u8::from(clear));
            net.step(&rms_norm(&x, &norm_weights(l.d_model), 1e-6, &order));
            if clear {
                plain.iter_mut().for_each(|r| *r = None);
            }
            plain[l.row(&address)] = Some(limbs);
            for (i, want) in plain.iter().enumerate() {
                let got = match net.row(0, i).iter().all(|&v| v == 0.0) {
                    true => None,
                    false => Some(row_limbs(&net, &l, 0, i).expect("an exact row")),
                };
                assert_eq!(got, want.map(|w| w.to_vec()), "step {step}, row {i}");
            }
        }
    }

    /// Random writes and reads (three heads reading at once, some positions writing and reading
    /// the same row) through the real layer, fed by the bias-channel norm, against a plain array:
    /// every read bit-exact, every state row of every head decoded now and then.
    #[test]
    fn a_deltanet_layer_holds_limb_words_exactly() {
        let l = registers();
        assert_eq!((l.d_k(), l.d_v(), l.rows()), (256, 16, 240));
        let mut net = layer(&l);
        let mut plain: Vec<Option<[u32; 4]>> = vec![None; l.rows()];
        let mut rng = Rng::new(5);
        let order: Vec<usize> = (0..l.d_model).collect();
        let pick = |rng: &mut Rng| vec![(rng.next_u64() % 16) as usize, (rng.next_u64() % 15) as usize];
        for step in 0..400 {
            let write = rng.next_u64().is_multiple_of(3).then(|| {
                let limbs: [u32; 4] = core::array::from_fn(|j| match (step + j) % 5 {
                    0 => 0,
                    1 => 255,
                    _ => (rng.next_u64() % 256) as u32,
                });
                (pick(&mut rng), limbs)
            });
            let reads: Vec<Option<Vec<usize>>> = (0..3)
                .map(|h| match (h, &write) {
                    // Now and then a head reads the row this position writes.
                    (0, Some((a, _))) if step % 4 == 0 => Some(a.clone()),
                    _ => (!rng.next_u64().is_multiple_of(4)).then(|| pick(&mut rng)),
                })
                .enumerate()
                .map(|(h, a)| a.map(|a| if h == 2 { vec![a[0], FIXED] } else { a }))
                .collect();
            let x = stream(&l, write.as_ref().map(|(a, v)| (&a[..], *v)), &reads);
            let n = rms_norm(&x, &norm_weights(l.d_model), 1e-6, &order);
            let y = net.step(&n);
            if let Some((a, v)) = &write {
                plain[l.row(a)] = Some(*v);
            }
            for (h, read) in reads.iter().enumerate() {
                let want = read.as_ref().and_then(|a| plain[l.row(a)]).unwrap_or([0; 4]);
                let got = &y[l.heads[h].out..l.heads[h].out + 4];
                assert_eq!(got, want.map(|v| v as f32), "step {step}, head {h}: read {read:?}");
            }
            if step % 50 == 0 {
                for (i, p) in plain.iter().enumerate() {
                    for h in 0..3 {
                        assert_eq!(row_limbs(&net, &l, h, i), p.map(|p| p.to_vec()), "step {step}: head {h}, row {i}");
                    }
                }
                // The padding rows past the addresses stay empty.
                assert!((l.rows()..l.d_k()).all(|i| net.row(0, i).iter().all(|&v| v == 0.0)));
            }
        }
    }

    #[test]
    fn rows_are_the_groups_mixed_radix() {
        let l = registers();
        assert_eq!(l.row(&[0, 0]), 0);
        assert_eq!(l.row(&[1, 2]), 17);
        assert_eq!(l.digits(17), vec![1, 2]);
        assert_eq!(l.row(&[15, 14]), 239);
    }
}
