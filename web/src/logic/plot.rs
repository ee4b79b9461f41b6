//! The geometry of the tabs' charts: axes with round ticks, grouped bars and lines, in the SVG's
//! own units. The component (`components::chart`) only draws what this computes, so what a
//! chart shows is tested here against the data: bar heights proportional to values on one
//! axis from zero, points where their values say.
//!
//! Why SVG drawn by hand and not `plotters`: four small charts need an axis, bars and a line,
//! which is about this file; plotters' canvas backend would add a dependency to the page and
//! paint pixels that the end-to-end tests cannot read, where SVG elements carry their values.

/// The plot area inside a chart of `WIDTH × HEIGHT` units: room on the left for the value axis,
/// below for the category or x axis.
pub const WIDTH: f64 = 640.0;
pub const HEIGHT: f64 = 260.0;
pub const LEFT: f64 = 64.0;
pub const RIGHT: f64 = 12.0;
pub const TOP: f64 = 12.0;
pub const BOTTOM: f64 = 44.0;

/// A line's points, (x, y) in data units.
pub type Points = Vec<(f64, f64)>;

/// A value axis from 0 to `max`, with its tick values.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub max: f64,
    pub ticks: Vec<f64>,
}

impl Axis {
    /// From zero to the first round number at or above `top`, in the smallest 1, 2 or 5 × 10ⁿ
    /// step that needs at most five intervals.
    /// A non-positive or non-finite `top` gives the axis 0…1.
    pub fn up_to(top: f64) -> Axis {
        let top = if top.is_finite() && top > 0.0 { top } else { 1.0 };
        let rough = top / 5.0;
        let magnitude = 10f64.powf(rough.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|s| *s >= rough).unwrap_or(rough);
        let n = (top / step - 1e-9).ceil().max(1.0) as usize;
        Axis { max: step * n as f64, ticks: (0..=n).map(|i| step * i as f64).collect() }
    }

    /// The y coordinate of `v` (SVG y grows downward).
    pub fn y(&self, v: f64) -> f64 {
        let h = HEIGHT - TOP - BOTTOM;
        HEIGHT - BOTTOM - (v.clamp(0.0, self.max) / self.max) * h
    }
}

/// A tick label: few digits, SI suffixes for large values.
pub fn tick_label(v: f64) -> String {
    let (v, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = if v == v.trunc() {
        0
    } else if (v * 10.0).fract().abs() < 1e-9 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{suffix}")
}

/// One bar: where it is and what it stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    pub group: usize,
    pub series: usize,
    pub value: f64,
}

/// The width of one group's slot on the category axis.
fn slot(groups: usize) -> f64 {
    (WIDTH - LEFT - RIGHT) / groups.max(1) as f64
}

/// Groups of bars side by side, one bar per series in each group (`values[group][series]`,
/// `None` where a series has no value there), on `axis`.
pub fn bars(values: &[Vec<Option<f64>>], series: usize, axis: &Axis) -> Vec<Bar> {
    let slot = slot(values.len());
    // A fifth of each slot stays empty between groups.
    let width = slot * 0.8 / series.max(1) as f64;
    let mut out = Vec::new();
    for (g, row) in values.iter().enumerate() {
        for (s, v) in row.iter().enumerate().take(series) {
            let Some(value) = v.filter(|v| v.is_finite() && *v >= 0.0) else { continue };
            let y = axis.y(value);
            let x = LEFT + g as f64 * slot + slot * 0.1 + s as f64 * width;
            out.push(Bar { x, y, width, height: HEIGHT - BOTTOM - y, group: g, series: s, value });
        }
    }
    out
}

/// The centre of group `g` of `groups` on the category axis (for its label).
pub fn group_centre(g: usize, groups: usize) -> f64 {
    LEFT + (g as f64 + 0.5) * slot(groups)
}

/// A group's label in lines that fit its slot of `groups` on the category axis (tick text is
/// about 6 units a character), broken at spaces, at most three lines (room under the axis);
/// a last line that still does not fit ends in "…". The whole label stays in the bar's tooltip.
pub fn label_lines(label: &str, groups: usize) -> Vec<String> {
    let fits = ((slot(groups) / 6.0).floor() as usize).max(3);
    let mut lines: Vec<String> = Vec::new();
    for word in label.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= fits => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    if lines.len() > 3 {
        let rest = lines.split_off(2).join(" ");
        lines.push(rest);
    }
    for line in &mut lines {
        if line.chars().count() > fits {
            let kept: String = line.chars().take(fits - 1).collect();
            *line = format!("{}…", kept.trim_end());
        }
    }
    lines
}

/// An x axis for `points` (their x from 0 or 1 up), and each point placed: `(x, y)` in SVG units.
pub fn line(points: &[(f64, f64)], x_axis: &Axis, y_axis: &Axis) -> Vec<(f64, f64)> {
    points.iter().map(|&(x, y)| (x_of(x, x_axis), y_axis.y(y))).collect()
}

/// The x of value `v` on `x_axis` (for tick marks under a line chart).
pub fn x_of(v: f64, x_axis: &Axis) -> f64 {
    LEFT + v.clamp(0.0, x_axis.max) / x_axis.max * (WIDTH - LEFT - RIGHT)
}

/// Measured rates for a chart: (group, series, value), the latest measurement of each pair.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates(pub Vec<(String, String, f64)>);

impl Rates {
    /// Records `value` for (`group`, `series`), replacing an earlier one.
    pub fn record(&mut self, group: &str, series: &str, value: f64) {
        match self.0.iter_mut().find(|(g, s, _)| g == group && s == series) {
            Some(r) => r.2 = value,
            None => self.0.push((group.to_string(), series.to_string(), value)),
        }
    }

    /// The groups in the order first measured, each with a value per name of `series`.
    pub fn groups(&self, series: &[String]) -> Vec<(String, Vec<Option<f64>>)> {
        let mut out: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        for (g, s, v) in &self.0 {
            let at = match out.iter().position(|(name, _)| name == g) {
                Some(i) => i,
                None => {
                    out.push((g.clone(), vec![None; series.len()]));
                    out.len() - 1
                }
            };
            if let Some(i) = series.iter().position(|name| name == s) {
                out[at].1[i] = Some(*v);
            }
        }
        out
    }
}

/// The largest finite value of `values`, for [`Axis::up_to`].
pub fn top(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().filter(|v| v.is_finite()).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn axes_end_on_a_round_number_at_or_above_the_data() {
        for (top, max, step) in [
            (7.3, 8.0, 2.0),
            (0.042, 0.05, 0.01),
            (1.0, 1.0, 0.2),
            (30_123.0, 40_000.0, 10_000.0),
            (24_000.0, 25_000.0, 5_000.0),
        ] {
            let a = Axis::up_to(top);
            assert!((a.max - max).abs() < 1e-9 * max, "{top}: {a:?}");
            assert!((a.ticks[1] - step).abs() < 1e-9 * max, "{top}: {a:?}");
            assert!(a.max >= top && a.ticks.len() <= 7);
        }
        assert_eq!(Axis::up_to(0.0), Axis::up_to(f64::NAN));
        assert_eq!(Axis::up_to(-3.0).max, 1.0);
        assert_eq!(
            [tick_label(0.0), tick_label(2.5), tick_label(0.25), tick_label(35_000.0), tick_label(2e9)],
            ["0", "2.5", "0.25", "35k", "2G"]
        );
    }

    #[test]
    fn group_labels_wrap_to_their_slot() {
        // Six groups: 94 units a slot, 15 characters a line.
        assert_eq!(label_lines("gate|up + norm + SiLU·up", 6), ["gate|up + norm", "+ SiLU·up"]);
        assert_eq!(label_lines("attention", 6), ["attention"]);
        // Forty groups: the narrowest slot still takes three characters a line.
        assert_eq!(label_lines("a b c d e f g h i j k l m n o p q r s t", 40), ["a b", "c d", "e…"]);
        let long = label_lines("vocab + final norm + argmax and then some more words", 6);
        assert!(long.len() <= 3 && long.iter().all(|l| l.chars().count() <= 15), "{long:?}");
        assert!(long[2].ends_with('…'), "{long:?}");
        assert!(label_lines("", 3).is_empty());
    }

    #[test]
    fn bar_heights_are_proportional_to_the_values_and_stay_in_the_plot() {
        let values = vec![vec![Some(4.0), Some(1.0)], vec![None, Some(2.0)], vec![Some(f64::NAN), Some(0.0)]];
        let axis = Axis::up_to(top(values.iter().flatten().flatten().copied()));
        let bars = bars(&values, 2, &axis);
        // The missing and the non-finite values have no bar.
        assert_eq!(bars.iter().map(|b| (b.group, b.series)).collect::<Vec<_>>(), [(0, 0), (0, 1), (1, 1), (2, 1)]);
        let full = HEIGHT - TOP - BOTTOM;
        for b in &bars {
            assert!((b.height - b.value / axis.max * full).abs() < 1e-9, "{b:?}");
            assert!((b.y + b.height - (HEIGHT - BOTTOM)).abs() < 1e-9, "bars stand on the axis");
            assert!(b.x >= LEFT && b.x + b.width <= WIDTH - RIGHT + 1e-9);
        }
        // Side by side, no overlap, and in group order.
        assert!(bars.windows(2).all(|w| w[0].x + w[0].width <= w[1].x + 1e-9));
        assert!((group_centre(0, 3) - (bars[0].x + bars[1].x + bars[1].width) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn rates_keep_the_latest_of_each_pair_in_first_measured_order() {
        let mut r = Rates::default();
        r.record("TL1 768×768", "scalar", 1.0);
        r.record("TL2 768×768", "simd128", 3.0);
        r.record("TL1 768×768", "simd128", 2.0);
        r.record("TL1 768×768", "scalar", 1.5);
        r.record("TL1 768×768", "unknown", 9.0);
        let series = ["scalar".to_string(), "simd128".into(), "webgpu".into()];
        assert_eq!(
            r.groups(&series),
            [
                ("TL1 768×768".to_string(), vec![Some(1.5), Some(2.0), None]),
                ("TL2 768×768".to_string(), vec![None, Some(3.0), None]),
            ]
        );
    }

    #[test]
    fn line_points_land_where_their_values_say() {
        let pts = [(0.0, 0.0), (5.0, 50.0), (10.0, 100.0)];
        let (xa, ya) = (Axis::up_to(10.0), Axis::up_to(100.0));
        let placed = line(&pts, &xa, &ya);
        assert_eq!(placed[0], (LEFT, HEIGHT - BOTTOM));
        assert_eq!(placed[2], (WIDTH - RIGHT, TOP));
        assert!((placed[1].0 - (LEFT + WIDTH - RIGHT) / 2.0).abs() < 1e-9);
        assert!((placed[1].1 - (TOP + HEIGHT - BOTTOM) / 2.0).abs() < 1e-9);
        assert_eq!(x_of(5.0, &xa), placed[1].0);
    }
}
