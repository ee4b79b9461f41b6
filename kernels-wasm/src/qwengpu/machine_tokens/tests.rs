use super::*;
use crate::bitnet::random::Rng;
use crate::qwengpu::limbs::norm_weights;

/// The model's argmax: the highest logit, ties to the lowest id.
fn argmax(l: &[f32]) -> usize {
    crate::bitnet::model::sample::greedy(l) as usize
}
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const D: usize = 1024;

fn shuffled(rng: &mut Rng) -> Vec<usize> {
    let mut o: Vec<usize> = (0..D).collect();
    for i in (1..D).rev() {
        o.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    o
}

/// The other kind's field channels hold values in their ranges (the previous record, a stale
/// value), and other machine state sits in channels 8… below 2^16.
fn other_state(v: &Vocab, rng: &mut Rng) -> Vec<(usize, f32)> {
    let mut o: Vec<(usize, f32)> =
        v.val.iter().chain(&v.record).map(|f| (f.channel, (rng.next_u64() % f.size as u64) as f32)).collect();
    o.extend((0..200).map(|_| (8 + (rng.next_u64() % 280) as usize, (rng.next_u64() % 65_536) as f32)));
    o
}

#[test]
fn token_ids_and_tokens_round_trip() {
    let v = Vocab::at(1);
    assert_eq!((v.vals(), v.len()), (65_536, 65_536 + 32 * 64 * 16));
    for id in 0..v.len() {
        let t = v.token(id).unwrap();
        assert_eq!(v.id(t), id, "{t:?}");
    }
    assert_eq!(v.token(v.len()), None);
}

/// Every machine token, embedded into a stream that also holds other machine state (the other
/// kind's channels included), normalised by the final norm (a shuffled summation order) and
/// unembedded: its own logit is exact and every token one step away in a field is exactly that
/// field's weight below; for a sample, the argmax over all 98,304 rows in two orders is the
/// token and the runner-up is exactly 1 below.
#[test]
fn every_machine_token_comes_back_through_the_norm_and_the_head() {
    let v = Vocab::at(1);
    let mut rng = Rng::new(5);
    let order = shuffled(&mut rng);
    let w = norm_weights(D);
    let logit = |n: &[f32], t: Token| v.head_row(t).iter().fold(0.0f32, |s, &(c, w)| s + w * n[c]);
    for id in 0..v.len() {
        let t = v.token(id).unwrap();
        let n = final_norm(&v.stream(D, t, &other_state(&v, &mut rng)), &w, &order);
        assert_eq!(n[BIAS], 1.0);
        let own = logit(&n, t);
        let squares = match t {
            Token::Val(x) => f32::from(x as u8).powi(2) + f32::from((x >> 8) as u8).powi(2),
            Token::Record { warp, block, mask } => (warp * warp + block * block + mask * mask) as f32 + KIND,
        };
        assert_eq!(own, LIFT + squares, "{t:?}");
        let step = |u: Token| own - logit(&n, u);
        match t {
            Token::Val(x) => {
                for u in [x ^ 1, x ^ 0x100] {
                    let d = u as i32 - x as i32;
                    let (dl, dh) = ((u as u8) as i32 - (x as u8) as i32, (u >> 8) as i32 - (x >> 8) as i32);
                    assert_eq!(step(Token::Val(u)), (dl * dl + dh * dh) as f32, "{t:?} against {u} ({d})");
                }
            }
            Token::Record { warp, block, mask } => {
                let u = Token::Record { warp: warp ^ 1, block, mask };
                assert_eq!(step(u), 1.0, "{t:?} against {u:?}");
            }
        }
    }
    let mut sample: Vec<usize> = vec![0, 255, 256, 65_535, 65_536, 65_537, v.len() - 1];
    sample.extend((0..120).map(|_| (rng.next_u64() % v.len() as u64) as usize));
    for id in sample {
        let t = v.token(id).unwrap();
        let n = final_norm(&v.stream(D, t, &other_state(&v, &mut rng)), &w, &order);
        for backwards in [false, true] {
            let mut l = v.logits(&n, backwards);
            assert_eq!(argmax(&l), id, "{t:?}");
            let top = l[id];
            l[id] = f32::MIN;
            assert_eq!(top - l[argmax(&l)], 1.0, "{t:?}: the runner-up");
        }
    }
}

/// At a machine position the text tokens' logits come from text channels that the bias has
/// scaled by about 2^−29: with text activations up to ±30,000, the text model's norm weights
/// and a text unembedding of ±0.1, every machine winner is far above them.
#[test]
fn text_tokens_lose_at_machine_positions() {
    let v = Vocab::at(1);
    let mut rng = Rng::new(9);
    let text: Vec<usize> = (400..D).collect();
    let unembed: Vec<Vec<f32>> =
        (0..500).map(|_| text.iter().map(|_| (rng.next_u64() % 2001) as f32 / 10_000.0 - 0.1).collect()).collect();
    let order: Vec<usize> = (0..D).collect();
    // The text model's final-norm weights, about 1 (SmolLM2's are 0.5–6).
    let text_w: Vec<f32> = (0..D).map(|_| 0.5 + (rng.next_u64() % 5501) as f32 / 1000.0).collect();
    let w = final_weights(D, &text_w, &(1..400).collect::<Vec<_>>());
    for t in [Token::Val(0), Token::Val(0x1234), Token::Record { warp: 31, block: 0, mask: 15 }] {
        let mut other = other_state(&v, &mut rng);
        other.extend(text.iter().map(|&c| (c, (rng.next_u64() % 60_001) as f32 - 30_000.0)));
        let n = final_norm(&v.stream(D, t, &other), &w, &order);
        let best_text = unembed
            .iter()
            .map(|row| row.iter().zip(&text).map(|(w, &c)| w * n[c]).sum::<f32>())
            .fold(f32::MIN, f32::max);
        let l = v.logits(&n, false);
        assert_eq!(argmax(&l), v.id(t));
        assert!(best_text.abs() < 1.0 && l[v.id(t)] >= LIFT, "text {best_text}, machine {}", l[v.id(t)]);
    }
}

/// The reason for limbs: one 16-bit channel and `2v·x − v²` reach 2^32, and f32 gets the
/// argmax wrong.
#[test]
fn one_sixteen_bit_channel_would_not_be_exact() {
    let wrong = (0..=u16::MAX)
        .step_by(97)
        .filter(|&x| {
            let x = f32::from(x);
            let l: Vec<f32> = (0..1u32 << 16).map(|v| 2.0 * v as f32 * x - (v as f32) * (v as f32)).collect();
            argmax(&l) as f32 != x
        })
        .count();
    assert!(wrong > 300, "only {wrong} of 676 wrong");
}
