//! Which rows of a long table to put in the DOM: only those in view, plus a few either side.

use core::ops::Range;

/// Rows to render for a viewport scrolled to `scroll_top` (pixels), with `overscan` extra rows
/// above and below so fast scrolling does not flash empty space.
pub fn visible_rows(scroll_top: f64, viewport: f64, row_height: f64, total: usize, overscan: usize) -> Range<usize> {
    if total == 0 || row_height <= 0.0 {
        return 0..0;
    }
    let first = (scroll_top.max(0.0) / row_height).floor() as usize;
    let shown = (viewport.max(0.0) / row_height).ceil() as usize + 1;
    let start = first.saturating_sub(overscan).min(total);
    let end = (first + shown + overscan).min(total);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn windows_cover_the_viewport() {
        assert_eq!(visible_rows(0.0, 100.0, 20.0, 1000, 0), 0..6);
        assert_eq!(visible_rows(0.0, 100.0, 20.0, 1000, 3), 0..9);
        assert_eq!(visible_rows(200.0, 100.0, 20.0, 1000, 3), 7..19);
        assert_eq!(visible_rows(19_990.0, 100.0, 20.0, 1000, 3), 996..1000);
        assert_eq!(visible_rows(1e9, 100.0, 20.0, 1000, 3), 1000..1000);
        assert_eq!(visible_rows(0.0, 100.0, 20.0, 0, 3), 0..0);
        // Brute force: every row whose box intersects the viewport is rendered.
        for top in (0..5000).step_by(7) {
            let range = visible_rows(top as f64, 137.0, 23.0, 200, 0);
            for row in 0..200usize {
                let (y0, y1) = (row as f64 * 23.0, (row + 1) as f64 * 23.0);
                if y1 > top as f64 && y0 < top as f64 + 137.0 {
                    assert!(range.contains(&row), "top {top} row {row} {range:?}");
                }
            }
        }
    }
}
