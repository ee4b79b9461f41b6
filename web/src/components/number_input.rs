//! A labelled number field bound to a signal.

use leptos::prelude::*;
use std::fmt::Display;
use std::str::FromStr;

/// What the user types is parsed and clamped to `min..=max`; text that is not a number puts the
/// value it had back in the field.
#[component]
pub fn NumberInput<T>(
    label: &'static str,
    value: RwSignal<T>,
    min: T,
    max: T,
    #[prop(optional)] testid: Option<&'static str>,
    #[prop(default = "1")] step: &'static str,
) -> impl IntoView
where
    T: Copy + PartialOrd + FromStr + Display + Send + Sync + 'static,
{
    let clamp = move |v: T| {
        if v < min {
            min
        } else if v > max {
            max
        } else {
            v
        }
    };
    view! {
        <label>
            {label}
            " "
            <input
                type="number"
                min=min.to_string()
                max=max.to_string()
                step=step
                data-testid=testid
                prop:value=move || value.get().to_string()
                on:change=move |ev| {
                    let typed = event_target_value(&ev).trim().parse::<T>().ok();
                    value.set(typed.map_or(value.get_untracked(), clamp));
                }
            />
        </label>
    }
}
