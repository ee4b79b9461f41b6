use super::*;
use crate::bitnet::random::Rng;
use crate::qwengpu::limbs::norm_weights;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const D: usize = 1024;
const CH: ValChannels = ValChannels { lo: 7, hi: 300 };

fn orders(rng: &mut Rng) -> Vec<usize> {
    let mut o: Vec<usize> = (0..D).collect();
    for i in (1..D).rev() {
        o.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    o
}

/// Every VAL token, embedded into a stream that also holds other machine state, normalised by
/// the final norm (channels summed in a shuffled order) and unembedded (the rows' products in
/// two orders): the argmax is the token, and the runner-up exactly 1 below.
#[test]
fn every_val_token_comes_back_through_the_norm_and_the_head() {
    let mut rng = Rng::new(5);
    let other: Vec<(usize, f32)> =
        (0..200).map(|_| (8 + (rng.next_u64() % 280) as usize, (rng.next_u64() % 65_536) as f32)).collect();
    let order = orders(&mut rng);
    // Every value in a pass of the head is 65,536 × 65,536 products: a sample of 600 values,
    // the limbs' edges among them, checked fully; every value checked by its own logit and its
    // eight nearest competitors (where a rounding would show first).
    let mut sample: Vec<u16> = vec![0, 1, 255, 256, 257, 0x7fff, 0x8000, 0xff00, 0xfffe, 0xffff];
    sample.extend((0..590).map(|_| rng.next_u64() as u16));
    for &v in &sample {
        let n = final_norm(&stream(CH, D, v, &other), &norm_weights(D), &order);
        assert_eq!(n[BIAS], 1.0);
        for o in [[0, 1, 2], [2, 1, 0]] {
            let mut l = logits(CH, &n, o);
            assert_eq!(argmax(&l), v as usize, "value {v}");
            let top = l[v as usize];
            l[v as usize] = f32::MIN;
            assert_eq!(top - l[argmax(&l)], 1.0, "value {v}: the runner-up");
        }
    }
    for v in 0..=u16::MAX {
        let n = final_norm(&stream(CH, D, v, &other), &norm_weights(D), &order);
        let logit = |u: u16| head_row(CH, u).iter().fold(0.0f32, |s, &(c, w)| s + w * n[c]);
        let own = logit(v);
        let (l, h) = (f32::from(v as u8), f32::from((v >> 8) as u8));
        assert_eq!(own, LIFT + l * l + h * h, "value {v}");
        for (dl, dh) in [(1i32, 0i32), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1), (1, -1), (-1, 1)] {
            let (ul, uh) = (v as u8 as i32 + dl, (v >> 8) as i32 + dh);
            if (0..256).contains(&ul) && (0..256).contains(&uh) {
                let u = (uh * 256 + ul) as u16;
                assert_eq!(own - logit(u), (dl * dl + dh * dh) as f32, "value {v} against {u}");
            }
        }
    }
}

/// At a machine position the text tokens' logits come from text channels that the bias has
/// scaled by about 2^−29: with text activations up to ±30,000 and a text unembedding of ±0.1,
/// every VAL winner is still far above them.
#[test]
fn text_tokens_lose_at_machine_positions() {
    let mut rng = Rng::new(9);
    let text: Vec<usize> = (400..D).collect();
    let unembed: Vec<Vec<f32>> =
        (0..500).map(|_| text.iter().map(|_| (rng.next_u64() % 2001) as f32 / 10_000.0 - 0.1).collect()).collect();
    let order: Vec<usize> = (0..D).collect();
    // The text model's final-norm weights, about 1 (SmolLM2's are 0.5–6).
    let text_w: Vec<f32> = (0..D).map(|_| 0.5 + (rng.next_u64() % 5501) as f32 / 1000.0).collect();
    let w = final_weights(D, &text_w, &(1..400).collect::<Vec<_>>());
    for v in [0u16, 1, 0x1234, 0xffff] {
        let other: Vec<(usize, f32)> = text.iter().map(|&c| (c, (rng.next_u64() % 60_001) as f32 - 30_000.0)).collect();
        let n = final_norm(&stream(CH, D, v, &other), &w, &order);
        let best_text = unembed
            .iter()
            .map(|row| row.iter().zip(&text).map(|(w, &c)| w * n[c]).sum::<f32>())
            .fold(f32::MIN, f32::max);
        let l = logits(CH, &n, [0, 1, 2]);
        assert_eq!(argmax(&l), v as usize);
        assert!(best_text.abs() < 1.0 && l[v as usize] >= LIFT, "text {best_text}, VAL {}", l[v as usize]);
    }
}

/// The reason for two limbs: one 16-bit channel and `2v·x − v²` reach 2^32, and f32 gets the
/// argmax wrong.
#[test]
fn one_sixteen_bit_channel_would_not_be_exact() {
    let wrong = (0..=u16::MAX)
        .step_by(97)
        .filter(|&x| {
            let x = f32::from(x);
            let l: Vec<f32> = (0..VALUES).map(|v| 2.0 * v as f32 * x - (v as f32) * (v as f32)).collect();
            argmax(&l) as f32 != x
        })
        .count();
    assert!(wrong > 300, "only {wrong} of 676 wrong");
}
