//! The order of a kernel's basic blocks in the ROM of a machine that reconverges at the lowest
//! PC ([`Reconverge::LowestPc`](super::isa::Reconverge)).
//!
//! Such a warp always runs its lanes with the lowest PC. Lanes that took different paths from a
//! branch therefore meet at the branch's join (its immediate post-dominator) exactly when every
//! block on those paths sits before the join: the lanes ahead wait there, at a higher PC, until
//! the others arrive. clang's own layout breaks this: it rotates loops so that a loop's latch
//! (the join of a branch inside the body) comes *before* the body, and lanes then run the latch,
//! `bar.sync` included, without the others (`prefix_scan` and `bitonic_sort` gave wrong arrays).
//!
//! The order here is a topological order of the forward edges in which every loop's blocks are
//! contiguous and start at its header (loops nested in the order of their nesting), as
//! WebAssembly's structured control flow needs too. A forward edge then always goes to a later
//! block, so both paths of a branch come before their join; a back edge goes to its loop's
//! header, the loop's lowest block, so lanes still looping run before lanes that left, which
//! wait at the exit after the whole loop. Ties keep the PTX order, so straight code stays as it
//! was. An irreducible part (never made by clang from structured CUDA) keeps its PTX order
//! after the rest: the machine still computes it correctly, only its lanes may not merge.

use alloc::vec;
use alloc::vec::Vec;

/// Each block's predecessors.
fn predecessors(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut preds = vec![Vec::new(); succ.len()];
    for (b, s) in succ.iter().enumerate() {
        for &t in s {
            preds[t].push(b);
        }
    }
    preds
}

/// Dominator sets (`dom[b][x]`: `x` dominates `b`) of the blocks reachable from block 0;
/// `None` for unreachable blocks.
fn dominators(succ: &[Vec<usize>], preds: &[Vec<usize>]) -> Vec<Option<Vec<bool>>> {
    let n = succ.len();
    let mut reach = vec![false; n];
    let mut todo = vec![0];
    while let Some(b) = todo.pop() {
        if n > 0 && !core::mem::replace(&mut reach[b], true) {
            todo.extend(succ[b].iter().copied());
        }
    }
    let mut dom: Vec<Vec<bool>> = (0..n).map(|b| (0..n).map(|x| b != 0 || x == 0).collect()).collect();
    let mut changed = true;
    while changed {
        changed = false;
        for b in 1..n {
            if !reach[b] {
                continue;
            }
            let mut set = vec![true; n];
            for &p in preds[b].iter().filter(|&&p| reach[p]) {
                for (x, v) in set.iter_mut().zip(&dom[p]) {
                    *x &= *v;
                }
            }
            set[b] = true;
            if set != dom[b] {
                dom[b] = set;
                changed = true;
            }
        }
    }
    dom.into_iter().zip(reach).map(|(d, r)| r.then_some(d)).collect()
}

/// The ROM order of the blocks (a permutation of `0..succ.len()`, block 0 first).
pub fn loop_order(succ: &[Vec<usize>]) -> Vec<usize> {
    let n = succ.len();
    let preds = predecessors(succ);
    let dom = dominators(succ, &preds);
    let dominates = |x: usize, b: usize| dom[b].as_ref().is_some_and(|d| d[x]);
    // Natural loops: a back edge u → h (h dominates u); the body is every block that reaches u
    // without passing h.
    let mut body: Vec<Option<Vec<bool>>> = vec![None; n];
    for (u, s) in succ.iter().enumerate() {
        for &h in s.iter().filter(|&&h| dominates(h, u)) {
            let inside = body[h].get_or_insert_with(|| {
                let mut v = vec![false; n];
                v[h] = true;
                v
            });
            let mut todo = vec![u];
            while let Some(x) = todo.pop() {
                if !core::mem::replace(&mut inside[x], true) {
                    todo.extend(preds[x].iter().copied().filter(|&p| dom[p].is_some()));
                }
            }
        }
    }
    let back = |u: usize, v: usize| dominates(v, u);
    let mut order = Vec::with_capacity(n);
    let region: Vec<bool> = dom.iter().map(Option::is_some).collect();
    place(succ, &body, &back, &region, None, &mut order);
    // Unreachable blocks (and any part `place` could not order) keep their PTX order.
    let mut placed = vec![false; n];
    for &b in &order {
        placed[b] = true;
    }
    order.extend((0..n).filter(|&b| !placed[b]));
    order
}

/// Orders the blocks of `region` (a loop's body with its header `header`, or the whole
/// reachable graph): each loop directly inside it is one item, placed as a whole where its
/// header goes; items in a topological order of the forward edges, the lowest PTX index first.
fn place(
    succ: &[Vec<usize>],
    body: &[Option<Vec<bool>>],
    back: &impl Fn(usize, usize) -> bool,
    region: &[bool],
    header: Option<usize>,
    order: &mut Vec<usize>,
) {
    let n = succ.len();
    let size = |h: usize| body[h].as_ref().map_or(0, |b| b.iter().filter(|&&x| x).count());
    // The item of each block: the header of the largest loop strictly inside the region that
    // holds it, or the block itself.
    let mut item: Vec<usize> = (0..n).collect();
    for b in (0..n).filter(|&b| region[b]) {
        let outer = (0..n)
            .filter(|&h| Some(h) != header && region[h] && body[h].as_ref().is_some_and(|v| v[b]))
            .max_by_key(|&h| (size(h), core::cmp::Reverse(h)));
        if let Some(h) = outer {
            item[b] = h;
        }
    }
    let items: Vec<usize> = (0..n).filter(|&b| region[b] && item[b] == b).collect();
    let mut incoming = vec![0usize; n];
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for u in (0..n).filter(|&u| region[u]) {
        for &v in succ[u].iter().filter(|&&v| region[v] && !back(u, v)) {
            let (a, b) = (item[u], item[v]);
            if a != b && !edges.contains(&(a, b)) {
                edges.push((a, b));
                incoming[b] += 1;
            }
        }
    }
    let mut ready: Vec<usize> = items.iter().copied().filter(|&i| incoming[i] == 0).collect();
    while let Some(at) = ready.iter().enumerate().min_by_key(|&(_, &i)| i).map(|(at, _)| at) {
        let i = ready.swap_remove(at);
        match &body[i] {
            Some(inner) if Some(i) != header => {
                let inner: Vec<bool> = inner.iter().zip(region).map(|(&a, &r)| a && r).collect();
                place(succ, body, back, &inner, Some(i), order);
            }
            _ => order.push(i),
        }
        for &(a, b) in &edges {
            if a == i {
                incoming[b] -= 1;
                if incoming[b] == 0 {
                    ready.push(b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The positions of each block in `order`.
    fn at(order: &[usize]) -> Vec<usize> {
        let mut at = vec![0; order.len()];
        for (i, &b) in order.iter().enumerate() {
            at[b] = i;
        }
        at
    }

    #[test]
    fn a_rotated_loop_puts_its_latch_after_its_body() {
        // clang's prefix_scan: 0 → 1 → {5, 3}; the loop's latch 2 comes before its header 3,
        // whose body 4 joins the latch; 2 → {3, 5}, 3 → {2, 4}, 4 → 2.
        let succ = vec![vec![1], vec![5, 3], vec![3, 5], vec![2, 4], vec![2], vec![]];
        let order = loop_order(&succ);
        assert_eq!(order[0], 0);
        let at = at(&order);
        // The header first, then the body, then the latch, then the exit.
        assert!(at[3] < at[4] && at[4] < at[2] && at[2] < at[5], "{order:?}");
    }

    #[test]
    fn forward_edges_go_forward_and_loops_are_contiguous() {
        // Random structured programs: sequences, if/else and loops nested at random.
        fn build(succ: &mut Vec<Vec<usize>>, depth: u32, seed: &mut u64) -> (usize, usize) {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let kind = if depth == 0 { 0 } else { (*seed >> 33) % 4 };
            let new = |succ: &mut Vec<Vec<usize>>| {
                succ.push(Vec::new());
                succ.len() - 1
            };
            match kind {
                0 => {
                    let b = new(succ);
                    (b, b)
                }
                1 => {
                    let (a0, a1) = build(succ, depth - 1, seed);
                    let (b0, b1) = build(succ, depth - 1, seed);
                    succ[a1].push(b0);
                    (a0, b1)
                }
                2 => {
                    let c = new(succ);
                    let (t0, t1) = build(succ, depth - 1, seed);
                    let (e0, e1) = build(succ, depth - 1, seed);
                    let j = new(succ);
                    succ[c].extend([t0, e0]);
                    succ[t1].push(j);
                    succ[e1].push(j);
                    (c, j)
                }
                _ => {
                    let h = new(succ);
                    let (b0, b1) = build(succ, depth - 1, seed);
                    let x = new(succ);
                    succ[h].extend([b0, x]);
                    succ[b1].push(h);
                    (h, x)
                }
            }
        }
        for s in 0..300u64 {
            let mut seed = s;
            let mut succ = vec![Vec::new()];
            let (first, _) = build(&mut succ, 4, &mut seed);
            succ[0].push(first);
            // Shuffle the numbering (as clang's layout does), keeping block 0 the entry.
            let n = succ.len();
            let mut perm: Vec<usize> = (0..n).collect();
            for i in (2..n).rev() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                perm.swap(i, 1 + (seed >> 33) as usize % i);
            }
            let mut shuffled = vec![Vec::new(); n];
            for (b, s) in succ.iter().enumerate() {
                shuffled[perm[b]] = s.iter().map(|&t| perm[t]).collect();
            }
            let order = loop_order(&shuffled);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "seed {s}: not a permutation");
            let at = at(&order);
            let dom = dominators(&shuffled, &predecessors(&shuffled));
            for (u, targets) in shuffled.iter().enumerate() {
                for &v in targets {
                    let back_edge = dom[u].as_ref().is_some_and(|d| d[v]);
                    assert!(back_edge || at[u] < at[v], "seed {s}: forward edge {u} → {v} goes back in {order:?}");
                    if back_edge {
                        // The loop v..=u is contiguous: every block placed between them is in
                        // the loop (reaches u without passing v).
                        for &w in &order[at[v]..=at[u]] {
                            let mut seen = vec![false; n];
                            let mut todo = vec![w];
                            let mut reaches = false;
                            while let Some(x) = todo.pop() {
                                if x == u {
                                    reaches = true;
                                    break;
                                }
                                if x != v && !core::mem::replace(&mut seen[x], true) {
                                    todo.extend(shuffled[x].iter().copied());
                                }
                            }
                            assert!(w == v || reaches, "seed {s}: {w} sits inside loop {v}..{u} in {order:?}");
                        }
                    }
                }
            }
        }
    }
}
