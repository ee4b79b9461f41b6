//! Play / pause / step / back / speed over a recorded list of steps. The position is a signal
//! the caller owns, so any view can follow it.

use crate::logic::steps::{StepPlayer, SPEEDS};
use leptos::prelude::*;
use std::time::Duration;

/// Timer period while playing; the player converts elapsed time to steps, so speed is exact.
const TICK: Duration = Duration::from_millis(16);

#[component]
pub fn StepControls(
    /// Number of recorded steps.
    #[prop(into)]
    len: Signal<usize>,
    /// The step shown now; written by the controls.
    position: RwSignal<usize>,
) -> impl IntoView {
    let player = RwSignal::new(StepPlayer::new(len.get_untracked()));
    // Keep the player and the caller's position in sync both ways.
    Effect::new(move |_| {
        let n = len.get();
        player.update(|p| p.set_len(n));
    });
    Effect::new(move |_| {
        let p = player.get().position;
        if position.get_untracked() != p {
            position.set(p);
        }
    });
    Effect::new(move |_| {
        let wanted = position.get();
        if player.get_untracked().position != wanted {
            player.update(|p| p.seek(wanted));
        }
    });

    let last_tick = StoredValue::new(0.0f64);
    let now = || window().performance().map(|p| p.now()).unwrap_or(0.0);
    if let Ok(handle) = set_interval_with_handle(
        move || {
            let t = now();
            let elapsed = t - last_tick.get_value();
            last_tick.set_value(t);
            if player.with_untracked(|p| p.playing) {
                player.update(|p| p.tick(elapsed));
            }
        },
        TICK,
    ) {
        on_cleanup(move || handle.clear());
    }

    let playing = move || player.with(|p| p.playing);
    view! {
        <div class="step-controls" data-testid="step-controls">
            <button data-testid="step-back" title="back" on:click=move |_| player.update(StepPlayer::back)>"« back"</button>
            <Show
                when=playing
                fallback=move || {
                    view! {
                        <button
                            data-testid="step-play"
                            on:click=move |_| {
                                last_tick.set_value(now());
                                player.update(StepPlayer::play)
                            }
                        >
                            "▶ play"
                        </button>
                    }
                }
            >
                <button data-testid="step-pause" on:click=move |_| player.update(StepPlayer::pause)>"pause"</button>
            </Show>
            <button data-testid="step-next" title="step" on:click=move |_| player.update(StepPlayer::step)>"step »"</button>
            <label>
                "speed "
                <select
                    data-testid="step-speed"
                    on:change=move |ev| {
                        if let Ok(s) = event_target_value(&ev).parse::<f64>() {
                            player.update(|p| p.set_speed(s));
                        }
                    }
                >
                    {SPEEDS
                        .iter()
                        .map(|s| {
                            let selected = *s == StepPlayer::new(0).speed;
                            view! { <option value=s.to_string() selected=selected>{format!("{s}/s")}</option> }
                        })
                        .collect_view()}
                </select>
            </label>
            <input
                type="range"
                data-testid="step-slider"
                min="0"
                max=move || len.get().saturating_sub(1).to_string()
                prop:value=move || player.with(|p| p.position).to_string()
                on:input=move |ev| {
                    if let Ok(v) = event_target_value(&ev).parse::<usize>() {
                        player.update(|p| p.seek(v));
                    }
                }
            />
            <span class="step-position" data-testid="step-position">
                {move || player.with(|p| format!("step {} / {}", p.position + usize::from(p.len > 0), p.len))}
            </span>
        </div>
    }
}
