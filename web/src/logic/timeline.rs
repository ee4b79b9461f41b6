//! Timeline layout: spans (an operator trace, kernel launches) packed into as few lanes as
//! possible without overlap, and placed as fractions of the visible time range.

#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    /// Nanoseconds from the start of the trace.
    pub start_ns: u64,
    pub end_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub index: usize,
    pub lane: usize,
    /// Left edge and width as fractions of the whole range, in `0..=1`.
    pub left: f64,
    pub width: f64,
}

/// The whole time range of `spans`.
pub fn extent(spans: &[Span]) -> (u64, u64) {
    let t0 = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = spans.iter().map(|s| s.end_ns.max(s.start_ns)).max().unwrap_or(0);
    (t0, t1)
}

/// Greedy interval colouring in start order: each span takes the first lane free at its start.
/// Optimal for intervals (the lane count equals the largest number overlapping at one instant).
pub fn layout(spans: &[Span]) -> (Vec<Placed>, usize) {
    let (t0, t1) = extent(spans);
    layout_in(spans, t0, t1)
}

/// [`layout`] with fractions of the range `t0..t1` (a zoomed view: spans already clipped to it).
pub fn layout_in(spans: &[Span], t0: u64, t1: u64) -> (Vec<Placed>, usize) {
    let range = t1.saturating_sub(t0).max(1) as f64;
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].start_ns, spans[i].end_ns));
    let mut lane_free_at: Vec<u64> = Vec::new();
    let mut placed = Vec::with_capacity(spans.len());
    for i in order {
        let s = &spans[i];
        let end = s.end_ns.max(s.start_ns);
        let lane = match lane_free_at.iter().position(|&free| free <= s.start_ns) {
            Some(l) => l,
            None => {
                lane_free_at.push(0);
                lane_free_at.len() - 1
            }
        };
        lane_free_at[lane] = end;
        placed.push(Placed {
            index: i,
            lane,
            left: s.start_ns.saturating_sub(t0) as f64 / range,
            width: (end - s.start_ns) as f64 / range,
        });
    }
    (placed, lane_free_at.len())
}

/// The visible part of a timeline, as fractions of its whole range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zoom {
    pub from: f64,
    pub to: f64,
}

impl Default for Zoom {
    fn default() -> Self {
        Zoom { from: 0.0, to: 1.0 }
    }
}

impl Zoom {
    /// The narrowest view: a millionth of the range is below any trace's resolution.
    const MIN_WIDTH: f64 = 1e-6;

    /// Scales the view's width by `factor` (< 1 zooms in) about its centre, kept inside 0..1.
    pub fn scaled(self, factor: f64) -> Zoom {
        let width = ((self.to - self.from) * factor).clamp(Self::MIN_WIDTH, 1.0);
        let centre = (self.from + self.to) / 2.0;
        Zoom { from: centre - width / 2.0, to: centre + width / 2.0 }.clamped()
    }

    /// Moves the view by `by` of its own width (negative: earlier), kept inside 0..1.
    pub fn panned(self, by: f64) -> Zoom {
        let shift = (self.to - self.from) * by;
        Zoom { from: self.from + shift, to: self.to + shift }.clamped()
    }

    fn clamped(self) -> Zoom {
        let width = (self.to - self.from).clamp(Self::MIN_WIDTH, 1.0);
        let from = self.from.clamp(0.0, 1.0 - width);
        Zoom { from, to: from + width }
    }

    /// How many times the whole range is magnified.
    pub fn magnification(self) -> f64 {
        1.0 / (self.to - self.from)
    }
}

/// The spans visible through `zoom`, clipped to it, and the window `(start, end)` in ns.
pub fn window(spans: &[Span], zoom: Zoom) -> (Vec<Span>, u64, u64) {
    let (t0, t1) = extent(spans);
    let range = (t1 - t0) as f64;
    let (a, b) = (t0 + (zoom.from * range) as u64, t0 + (zoom.to * range).ceil() as u64);
    let visible = spans
        .iter()
        .filter(|s| s.start_ns < b && (s.end_ns > a || s.start_ns >= a))
        .map(|s| Span { name: s.name.clone(), start_ns: s.start_ns.max(a), end_ns: s.end_ns.clamp(a, b) })
        .collect();
    (visible, a, b.max(a + 1))
}

/// "1.50 ms", "820 ns": durations as people read them.
pub fn format_ns(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.2} µs", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn span(start: u64, end: u64) -> Span {
        Span { name: format!("{start}-{end}"), start_ns: start, end_ns: end }
    }

    #[test]
    fn zooming_clips_to_the_window_and_stays_inside_the_range() {
        let spans = [span(0, 10), span(10, 50), span(50, 100)];
        assert_eq!(window(&spans, Zoom::default()), (spans.to_vec(), 0, 100));
        let z = Zoom::default().scaled(0.5); // the middle half: 25..75
        assert_eq!((z.from, z.to, z.magnification()), (0.25, 0.75, 2.0));
        let (visible, a, b) = window(&spans, z);
        assert_eq!((a, b), (25, 75));
        let cut: Vec<(u64, u64)> = visible.iter().map(|s| (s.start_ns, s.end_ns)).collect();
        assert_eq!(cut, [(25, 50), (50, 75)]); // 0..10 is outside; the others are clipped
        let (placed, _) = layout_in(&visible, a, b);
        assert_eq!((placed[0].left, placed[0].width, placed[1].left), (0.0, 0.5, 0.5));
        // Panning stops at the edges; zooming out never goes past the whole range.
        assert_eq!(z.panned(-10.0), Zoom { from: 0.0, to: 0.5 });
        assert_eq!(z.panned(10.0), Zoom { from: 0.5, to: 1.0 });
        assert_eq!(z.scaled(100.0), Zoom::default());
        let narrowest = Zoom::default().scaled(1e-12);
        assert!(narrowest.to - narrowest.from > 0.99e-6, "{narrowest:?}");
    }

    #[test]
    fn overlapping_spans_get_separate_lanes() {
        let spans = [span(0, 10), span(5, 15), span(10, 20), span(12, 14)];
        let (placed, lanes) = layout(&spans);
        assert_eq!(lanes, 3); // 5..15, 10..20 and 12..14 overlap at t=12
        for a in &placed {
            for b in &placed {
                let (sa, sb) = (&spans[a.index], &spans[b.index]);
                if a.index != b.index && a.lane == b.lane {
                    assert!(sa.end_ns <= sb.start_ns || sb.end_ns <= sa.start_ns, "{sa:?} {sb:?}");
                }
            }
        }
        let first = placed.iter().find(|p| p.index == 0).unwrap();
        assert_eq!((first.left, first.width), (0.0, 0.5));
        assert_eq!(layout(&[]).1, 0);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_ns(820), "820 ns");
        assert_eq!(format_ns(1_500_000), "1.50 ms");
        assert_eq!(format_ns(2_000), "2.00 µs");
        assert_eq!(format_ns(3_000_000_000), "3.00 s");
    }
}
