//! Heatmap geometry and colours: which cell a pointer is over, and the RGBA of a value.

/// The cell under a point, given the drawn size of the whole grid. `None` outside it.
pub fn cell_at(x: f64, y: f64, width: f64, height: f64, rows: usize, cols: usize) -> Option<(usize, usize)> {
    if rows == 0 || cols == 0 || width <= 0.0 || height <= 0.0 || x < 0.0 || y < 0.0 || x >= width || y >= height {
        return None;
    }
    let col = ((x / width) * cols as f64) as usize;
    let row = ((y / height) * rows as f64) as usize;
    Some((row.min(rows - 1), col.min(cols - 1)))
}

/// Diverging map for signed data (ternary weights, int8 activations, accumulators):
/// negative → blue, zero → near white, positive → red, saturating at `|v| = scale`.
pub fn diverging(value: f32, scale: f32) -> [u8; 4] {
    if !value.is_finite() {
        return [255, 0, 255, 255]; // magenta flags NaN/inf loudly
    }
    let t = if scale > 0.0 { (value / scale).clamp(-1.0, 1.0) } else { 0.0 };
    let fade = |m: f32| (245.0 - 200.0 * m).round() as u8;
    if t >= 0.0 {
        [245, fade(t), fade(t), 255]
    } else {
        [fade(-t), fade(-t), 245, 255]
    }
}

/// Largest |v| among finite values, the natural scale for [`diverging`].
pub fn max_abs(values: &[f32]) -> f32 {
    values.iter().filter(|v| v.is_finite()).fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Row-major RGBA pixels, one per cell, for `putImageData`.
pub fn rgba(values: &[f32], scale: f32) -> Vec<u8> {
    values.iter().flat_map(|&v| diverging(v, scale)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn hit_testing_matches_cell_bounds() {
        // 3 rows × 4 cols drawn at 400×300: each cell is 100×100.
        assert_eq!(cell_at(0.0, 0.0, 400.0, 300.0, 3, 4), Some((0, 0)));
        assert_eq!(cell_at(99.9, 99.9, 400.0, 300.0, 3, 4), Some((0, 0)));
        assert_eq!(cell_at(100.0, 100.0, 400.0, 300.0, 3, 4), Some((1, 1)));
        assert_eq!(cell_at(399.99, 299.99, 400.0, 300.0, 3, 4), Some((2, 3)));
        assert_eq!(cell_at(400.0, 10.0, 400.0, 300.0, 3, 4), None);
        assert_eq!(cell_at(-0.1, 10.0, 400.0, 300.0, 3, 4), None);
        assert_eq!(cell_at(1.0, 1.0, 400.0, 300.0, 0, 4), None);
        // Every pixel centre maps back to the cell that contains it.
        for r in 0..7 {
            for c in 0..5 {
                let (x, y) = ((c as f64 + 0.5) * 13.0, (r as f64 + 0.5) * 9.0);
                assert_eq!(cell_at(x, y, 65.0, 63.0, 7, 5), Some((r, c)));
            }
        }
    }

    #[test]
    fn colours_are_signed_and_saturate() {
        let white = diverging(0.0, 1.0);
        assert_eq!(white, [245, 245, 245, 255]);
        let red = diverging(1.0, 1.0);
        let blue = diverging(-1.0, 1.0);
        assert!(red[0] > red[2] && blue[2] > blue[0]);
        assert_eq!(diverging(5.0, 1.0), red);
        assert_eq!(diverging(-5.0, 1.0), blue);
        assert_eq!(diverging(f32::NAN, 1.0), [255, 0, 255, 255]);
        assert_eq!(max_abs(&[1.0, -3.0, f32::INFINITY]), 3.0);
        assert_eq!(rgba(&[0.0, 1.0], 1.0).len(), 8);
    }
}
