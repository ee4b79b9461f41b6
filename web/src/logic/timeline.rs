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

/// Greedy interval colouring in start order: each span takes the first lane free at its start.
/// Optimal for intervals (the lane count equals the largest number overlapping at one instant).
pub fn layout(spans: &[Span]) -> (Vec<Placed>, usize) {
    let t0 = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let t1 = spans.iter().map(|s| s.end_ns.max(s.start_ns)).max().unwrap_or(0);
    let range = (t1 - t0).max(1) as f64;
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
            left: (s.start_ns - t0) as f64 / range,
            width: (end - s.start_ns) as f64 / range,
        });
    }
    (placed, lane_free_at.len())
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
