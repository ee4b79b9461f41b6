//! The cluster against the single-machine runtime: the same tokens bit for bit, through
//! damaged frames, with a node dying, and budgets refused before any weight moves.

use super::budget::{self, Budget, KIB, MIB};
use super::coord::{Cluster, Peer, Timing};
use super::local::Local;
use super::msg::{Caps, Request, Response};
use super::node::Node;
use super::*;
use crate::bitnet::backend::Backend;
use crate::bitnet::model::par::Single;
use crate::bitnet::model::sample::Sampler;
use crate::bitnet::model::write;
use crate::bitnet::model::{dummy, load, Cache, Config, Exec, Logits, Model, Quant};
use crate::gguf::{GgmlType, Gguf};
use crate::protocol::esp32::Esp32Event;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const FIXTURE: &[u8] = include_bytes!("../../../assets/fixtures/bitnet-cpp/tiny.i2_s.gguf");

fn tiny(quant: Quant) -> Vec<u8> {
    let c = Config::dummy("tiny").unwrap();
    let tensors = write::tensors(&c, quant, GgmlType::F16, true);
    write::to_bytes(&dummy::metadata(&c, "tiny", quant), &tensors, |n, k| Ok(dummy::values(3, n, k))).unwrap()
}

fn caps(name: &str, b: Budget) -> Caps {
    Caps { name: name.into(), sram: b.sram, psram: b.psram, clock_hz: 240_000_000, link_bps: 921_600, emulated: true }
}

fn nodes(budgets: &[Budget]) -> Vec<Peer<Local>> {
    budgets
        .iter()
        .enumerate()
        .map(|(i, b)| Peer::new(alloc::format!("node{i}"), Local::new(Node::new(caps("n", *b), Backend::Scalar, None))))
        .collect()
}

/// The smallest PSRAM that holds one block of `file` (plus its KV cache for `context`), so a
/// model needs one node per block.
fn one_block_budget(file: &[u8], context: usize) -> Budget {
    let g = Gguf::parse(file).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = coord::block_weights(&g, file, &c).unwrap();
    let n = budget::need(&c, coord::quant_of(&g).unwrap(), 1, w[0], context);
    Budget { sram: 512 * KIB, psram: n.psram() }
}

fn single(m: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let ex = Exec::best(&Single);
    let mut cache = Cache::new(&m.config, 64);
    let mut logits = m.forward(prompt, &mut cache, &ex, Logits::Last).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = crate::bitnet::model::sample::greedy(&logits);
        out.push(t);
        logits = m.forward(&[t], &mut cache, &ex, Logits::Last).unwrap();
    }
    out
}

fn run(
    file: &[u8],
    peers: Vec<Peer<Local>>,
    prompt: &[u32],
    n: usize,
) -> (Result<Vec<u32>, Esp32Error>, Vec<Esp32Event>) {
    let m = load::load(Arc::new(file.to_vec())).unwrap();
    let g = Gguf::parse(file).unwrap();
    let mut events = Vec::new();
    let timing = Timing { resend_ms: 100, give_up_ms: 1_000, poll_ms: 10 };
    let out = Cluster::connect(peers, timing, None).and_then(|mut cl| {
        cl.load(file, &g, 64, ("test", ""), &mut |e| events.push(e))?;
        let ex = Exec::best(&Single);
        cl.generate(&m, prompt, n, &mut Sampler::new(0.0, 1), &ex, &mut |e| events.push(e)).map(|s| s.tokens)
    });
    (out, events)
}

#[test]
fn a_split_model_gives_the_single_machines_tokens_bit_for_bit() {
    // bitnet.cpp's own model, then dummies in each format.
    let files = [FIXTURE.to_vec(), tiny(Quant::I2s), tiny(Quant::Tl1), tiny(Quant::Tl2)];
    for file in &files {
        let m = load::load(Arc::new(file.clone())).unwrap();
        let prompt = [1, 313, 278, 403, 351, 414, 294];
        let want = single(&m, &prompt, 12);
        let b = one_block_budget(file, 64);
        let (got, events) = run(file, nodes(&[b; 4]), &prompt, 12);
        assert_eq!(got.unwrap(), want);
        // One block per node: the plan used as many nodes as blocks, and every node took part in
        // every step.
        let Some(Esp32Event::Plan { nodes, .. }) = events.first() else { panic!("no plan: {events:?}") };
        let used: Vec<u32> = nodes.iter().map(|n| n.count).collect();
        assert_eq!(used.iter().filter(|&&c| c > 0).count(), m.config.layers, "{used:?}");
        let steps = events.iter().filter_map(|e| if let Esp32Event::Step { hops, .. } = e { Some(hops) } else { None });
        assert!(steps.clone().count() >= 12);
        assert!(steps
            .clone()
            .all(|h| h.len() == m.config.layers && h.iter().all(|h| h.compute_us > 0 && h.link_us > 0)));
    }
}

#[test]
fn damaged_frames_both_ways_are_resent_and_the_tokens_do_not_change() {
    let file = tiny(Quant::I2s);
    let m = load::load(Arc::new(file.clone())).unwrap();
    let prompt = [1, 5, 9, 200];
    let want = single(&m, &prompt, 10);
    let peers = nodes(&[Budget::default(); 2])
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut p = p.flip_every(5, 11 + i as u64);
            p.link_mut().flip = Some(coord::Flipper::new(4, 77 + i as u64));
            p
        })
        .collect();
    let (got, events) = run(&file, peers, &prompt, 10);
    assert_eq!(got.unwrap(), want);
    let resends: u32 = events
        .iter()
        .filter_map(|e| {
            if let Esp32Event::Step { hops, .. } = e {
                Some(hops.iter().map(|h| h.resends).sum::<u32>())
            } else {
                None
            }
        })
        .sum();
    assert!(resends > 0, "no frame was resent");
}

#[test]
fn a_node_that_dies_mid_run_is_named_and_the_run_stops() {
    let file = tiny(Quant::I2s);
    let b = one_block_budget(&file, 64);
    let mut peers = nodes(&[b; 2]);
    peers[1].link_mut().die_after_forwards = Some(4);
    let (got, events) = run(&file, peers, &[1, 2, 3], 10);
    let err = got.unwrap_err();
    assert!(matches!(&err, Esp32Error::Node { node, why } if node == "node1" && why.contains("forward")), "{err}");
    let tokens = events.iter().filter(|e| matches!(e, Esp32Event::Token { .. })).count();
    assert!(tokens < 10, "{tokens} tokens");
}

#[test]
fn an_assignment_over_budget_is_refused_before_any_weight_moves() {
    let file = tiny(Quant::I2s);
    let b = one_block_budget(&file, 64);
    // Two blocks, one node that holds one: the coordinator refuses to plan.
    let small = Budget { psram: b.psram, ..b };
    let peers = nodes(&[small]);
    let (got, events) = run(&file, peers, &[1], 1);
    let e = got.unwrap_err();
    assert!(matches!(&e, Esp32Error::Budget(m) if m.contains("blocks 1..2") && m.contains("more nodes")), "{e}");
    assert!(events.is_empty(), "{events:?}");
    // Sent straight to a node, an oversized assignment is refused with the numbers and no
    // buffer is taken.
    let g = Gguf::parse(&file).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let mut node = Node::new(caps("n", Budget { psram: 100 * KIB, ..b }), Backend::Scalar, None);
    let mut tensors = Vec::new();
    for i in 0..2 {
        for (name, _) in crate::bitnet::model::build::block_tensors(&c, i) {
            let t = g.tensor(&name).unwrap();
            tensors.push(msg::TensorMeta {
                name,
                ty: t.ty.id(),
                dims: t.dims.clone(),
                bytes: t.bytes as u32,
                crc32: 0,
            });
        }
    }
    let a = msg::Assign { config: c, first: 0, count: 2, context: 64, tensors };
    let r = node.handle(Request::Assign(a));
    assert!(matches!(&r, Err(Esp32Error::Budget(m)) if m.contains("PSRAM") && m.contains("100.0 KiB")), "{r:?}");
    assert_eq!(node.stats().psram_used, 0);
}

#[test]
fn hostile_payloads_get_errors_not_panics() {
    let mut node = Node::new(caps("n", Budget::default()), Backend::Scalar, None);
    let mut rng = crate::bitnet::random::Rng::new(9);
    for cmd in 0..=8u8 {
        for len in [0usize, 1, 3, 7, 40, 200] {
            let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let mut dec = wire::Decoder::default();
            dec.push(&node.on_decoded(wire::Decoded::Frame(wire::Frame { cmd, seq: 1 + len as u16, payload })));
            let Some(wire::Decoded::Frame(f)) = dec.next_frame() else { panic!("no answer") };
            let r = Response::decode(f.cmd, &f.payload).unwrap();
            // Only a hello, a commit-less stats or a reset can succeed on noise.
            assert!(matches!(r, Response::Error(_) | Response::Caps(_) | Response::Stats(_) | Response::Ok), "{r:?}");
        }
    }
    // A shape that would divide by zero.
    let mut c = Config::dummy("tiny").unwrap();
    c.heads = 0;
    let a = msg::Assign { config: c, first: 0, count: 1, context: 8, tensors: vec![] };
    assert!(matches!(node.handle(Request::Assign(a)), Err(Esp32Error::Protocol(m)) if m.contains("heads")));
    // Forward before any weights.
    assert!(node.handle(Request::Forward { start: 0, rows: vec![0.0; 256] }).is_err());
}

#[test]
fn the_125m_layout_is_split_over_the_fewest_nodes_that_hold_it() {
    let c = Config::dummy("125M").unwrap();
    for quant in [Quant::I2s, Quant::Tl1, Quant::Tl2] {
        let per_block: u64 = [
            (c.dim, c.dim),
            (c.kv_dim(), c.dim),
            (c.kv_dim(), c.dim),
            (c.dim, c.dim),
            (c.ffn, c.dim),
            (c.ffn, c.dim),
            (c.dim, c.ffn),
        ]
        .iter()
        .map(|&(m, k)| cost::packed_bytes(quant, m, k))
        .sum();
        let weights = vec![per_block; c.layers];
        let n = budget::fewest_nodes(&c, quant, &weights, 256, Budget::default()).unwrap();
        let plan = budget::plan(&c, quant, &weights, 256, &vec![Budget::default(); n]).unwrap();
        assert_eq!(plan.last().unwrap().end, c.layers);
        assert!(plan.iter().all(|r| !r.is_empty()));
        let e = budget::plan(&c, quant, &weights, 256, &vec![Budget::default(); n - 1]).unwrap_err();
        assert!(e.to_string().contains("more nodes"), "{e}");
        // Every node's share fits 8 MiB with its KV cache.
        for r in &plan {
            let need = budget::need(&c, quant, r.len(), per_block * r.len() as u64, 256);
            assert!(need.psram() <= 8 * MIB && need.max_rows(512 * KIB, c.dim) >= 1);
        }
    }
}

#[test]
fn the_cost_model_counts_every_ternary_weight_once_per_row() {
    let c = Config::dummy("125M").unwrap();
    let per_block = c.ternary_weights() / c.layers as u64;
    let k = cost::block_counts(&c, Quant::I2s, 3, 10);
    assert_eq!(k.simd_macs, 3 * per_block);
    assert_eq!(k.weight_bytes, 3 * per_block / 4);
    let t = cost::block_counts(&c, Quant::Tl1, 1, 0);
    assert_eq!(t.lut_lookups, per_block / 2);
    // 125M I2_S: a block streams 2.36 MB at 40 MB/s, about 59 ms, plus its arithmetic.
    let us = cost::CostModel::esp32s3(240_000_000).micros(&cost::block_counts(&c, Quant::I2s, 1, 0));
    assert!((59_000..70_000).contains(&us), "{us}");
}
