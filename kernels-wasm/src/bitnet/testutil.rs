//! Test data: the edge cases every kernel must survive, and the plain reference dot product.

use super::quant::TernaryMatrix;
pub use super::random::Rng;
use alloc::vec::Vec;

/// The weight patterns and activation vectors every kernel is checked on besides random ones.
pub fn edge_cases(rows: usize, cols: usize) -> Vec<(TernaryMatrix, Vec<i8>)> {
    let fill = |v: i8| TernaryMatrix { rows, cols, w: alloc::vec![v; rows * cols], scale: 1.0 };
    let mut rng = Rng::new(99);
    let alternating: Vec<i8> = (0..cols).map(|i| if i % 2 == 0 { 127 } else { -128 }).collect();
    alloc::vec![
        (fill(1), alloc::vec![127; cols]),
        (fill(-1), alloc::vec![127; cols]),
        (fill(1), alloc::vec![-128; cols]),
        (fill(-1), alloc::vec![-128; cols]),
        (fill(0), rng.acts(cols)),
        (rng.ternary(rows, cols), alloc::vec![0; cols]),
        (fill(1), alternating.clone()),
        (rng.ternary(rows, cols), alternating),
    ]
}

/// `Σ_k w[r][k]·q[k]` by the definition: the independent reference for every accumulator.
pub fn plain_dot(t: &TernaryMatrix, q: &[i8]) -> Vec<i32> {
    (0..t.rows).map(|r| t.row(r).iter().zip(q).map(|(&w, &a)| w as i32 * a as i32).sum()).collect()
}
