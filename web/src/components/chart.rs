//! Bar and line charts as SVG, with a value axis from zero, its unit, and a legend. The
//! geometry is `logic::plot`'s; every bar and point carries its value (`data-value`, and a
//! tooltip) so what is drawn can be read back and checked.

use crate::logic::plot::{self, tick_label, Axis, BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH};
use leptos::prelude::*;

/// Colours of the series, in order (distinct in print and for the common colour blindnesses).
const PALETTE: [&str; 6] = ["#3558d4", "#e07b28", "#2a9d4b", "#b0428f", "#7a6a2b", "#1c9aa6"];

fn colour(series: usize) -> &'static str {
    PALETTE[series % PALETTE.len()]
}

/// The value axis: grid lines, tick labels and the unit, rotated, at the left.
fn value_axis(axis: &Axis, unit: &str) -> impl IntoView {
    let ticks = axis
        .ticks
        .iter()
        .map(|&t| {
            let y = axis.y(t);
            view! {
                <line x1=LEFT x2=WIDTH - RIGHT y1=y y2=y class="grid" />
                <text x=LEFT - 6.0 y=y + 4.0 text-anchor="end" class="tick">{tick_label(t)}</text>
            }
        })
        .collect_view();
    let mid = (TOP + HEIGHT - BOTTOM) / 2.0;
    view! {
        {ticks}
        <text class="unit" text-anchor="middle" transform=format!("translate(14 {mid}) rotate(-90)")>{unit.to_string()}</text>
    }
}

/// Said in the plot area while there is nothing to draw (`None`: "nothing measured yet").
fn empty_note(empty: &Option<String>) -> impl IntoView {
    let text = empty.clone().unwrap_or_else(|| "nothing measured yet".into());
    view! {
        <text x=(LEFT + WIDTH - RIGHT) / 2.0 y=(TOP + HEIGHT - BOTTOM) / 2.0 text-anchor="middle"
            class="empty" data-testid="chart-empty">{text}</text>
    }
}

fn legend(series: &[String]) -> impl IntoView {
    let items = series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            view! {
                <span class="legend-item">
                    <span class="swatch" style=format!("background:{}", colour(i))></span>
                    {s.clone()}
                </span>
            }
        })
        .collect_view();
    view! { <div class="legend">{items}</div> }
}

/// A chart's figure: its title, the legend of its series and the drawing.
fn frame(title: String, series: &[String], testid: String, svg: impl IntoView + 'static) -> impl IntoView {
    view! {
        <figure class="chart" data-testid=testid>
            <figcaption>{title}</figcaption>
            {legend(series)}
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img">{svg}</svg>
        </figure>
    }
}

/// Grouped bars: `groups` are (label, one value per series); `None` draws no bar.
#[component]
pub fn BarChart(
    #[prop(into)] title: String,
    /// The value axis's quantity and unit, e.g. "Gweights/s".
    #[prop(into)]
    unit: String,
    series: Vec<String>,
    #[prop(into)] groups: Signal<Vec<(String, Vec<Option<f64>>)>>,
    #[prop(into)] testid: String,
    /// What the plot area says while no value is there.
    #[prop(optional, into)]
    empty: Option<String>,
) -> impl IntoView {
    let n_series = series.len();
    let svg = move || {
        groups.with(|groups| {
            let values: Vec<Vec<Option<f64>>> = groups.iter().map(|(_, v)| v.clone()).collect();
            let axis = Axis::up_to(plot::top(values.iter().flatten().flatten().copied()));
            let bars = plot::bars(&values, n_series, &axis)
                .into_iter()
                .map(|b| {
                    let label = format!("{}: {}", groups[b.group].0, tick_label(b.value));
                    view! {
                        <rect x=b.x y=b.y width=b.width height=b.height fill=colour(b.series)
                            data-testid="chart-bar" data-value=b.value.to_string()
                            data-group=b.group.to_string() data-series=b.series.to_string()>
                            <title>{label}</title>
                        </rect>
                    }
                })
                .collect::<Vec<_>>();
            let labels = groups
                .iter()
                .enumerate()
                .map(|(g, (label, _))| {
                    let x = plot::group_centre(g, groups.len());
                    let lines = plot::label_lines(label, groups.len())
                        .into_iter()
                        .enumerate()
                        .map(|(i, line)| view! { <tspan x=x dy=if i == 0 { 0.0 } else { 12.0 }>{line}</tspan> })
                        .collect_view();
                    view! {
                        <text x=x y=HEIGHT - BOTTOM + 16.0 text-anchor="middle" class="tick"
                            data-testid="chart-group" data-label=label.clone()>
                            <title>{label.clone()}</title>
                            {lines}
                        </text>
                    }
                })
                .collect_view();
            let nothing = bars.is_empty().then(|| empty_note(&empty));
            let bars = bars.collect_view();
            view! {
                {value_axis(&axis, &unit)}
                {nothing}
                <line x1=LEFT x2=WIDTH - RIGHT y1=HEIGHT - BOTTOM y2=HEIGHT - BOTTOM class="axis" />
                {bars}
                {labels}
            }
        })
    };
    frame(title, &series, testid, svg)
}

/// Lines over a numeric x axis: `lines[s]` are series `s`'s (x, y) points.
#[component]
pub fn LineChart(
    #[prop(into)] title: String,
    #[prop(into)] x_label: String,
    #[prop(into)] unit: String,
    series: Vec<String>,
    #[prop(into)] lines: Signal<Vec<Vec<(f64, f64)>>>,
    #[prop(into)] testid: String,
    /// What the plot area says while no point is there.
    #[prop(optional, into)]
    empty: Option<String>,
) -> impl IntoView {
    let svg = move || {
        lines.with(|lines| {
            let points = || lines.iter().flatten();
            let x_axis = Axis::up_to(plot::top(points().map(|p| p.0)));
            let y_axis = Axis::up_to(plot::top(points().map(|p| p.1)));
            let drawn = lines
                .iter()
                .enumerate()
                .map(|(s, pts)| {
                    // A point without a finite value (a step that took no time) is left out.
                    let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
                    let placed = plot::line(&pts, &x_axis, &y_axis);
                    let path = placed.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ");
                    let dots = placed
                        .iter()
                        .zip(&pts)
                        .map(|(&(x, y), &(px, py))| {
                            view! {
                                <circle cx=x cy=y r=2.5 fill=colour(s) data-testid="chart-point"
                                    data-series=s.to_string() data-x=px.to_string() data-value=py.to_string()>
                                    <title>{format!("{}: {}", tick_label(px), tick_label(py))}</title>
                                </circle>
                            }
                        })
                        .collect_view();
                    view! {
                        <polyline points=path fill="none" stroke=colour(s) stroke-width=1.5 />
                        {dots}
                    }
                })
                .collect_view();
            let nothing = points().all(|p| !(p.0.is_finite() && p.1.is_finite())).then(|| empty_note(&empty));
            let x_ticks = x_axis
                .ticks
                .iter()
                .map(|&t| {
                    let x = plot::x_of(t, &x_axis);
                    view! { <text x=x y=HEIGHT - BOTTOM + 16.0 text-anchor="middle" class="tick">{tick_label(t)}</text> }
                })
                .collect_view();
            view! {
                {value_axis(&y_axis, &unit)}
                <line x1=LEFT x2=WIDTH - RIGHT y1=HEIGHT - BOTTOM y2=HEIGHT - BOTTOM class="axis" />
                {nothing}
                {x_ticks}
                <text x=(LEFT + WIDTH - RIGHT) / 2.0 y=HEIGHT - 6.0 text-anchor="middle" class="unit">{x_label.clone()}</text>
                {drawn}
            }
        })
    };
    frame(title, &series, testid, svg)
}
