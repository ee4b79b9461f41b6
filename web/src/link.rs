//! The address bar as page state: the tab and its main choices ([`crate::logic::link`]), read
//! once when the page opens and rewritten as they change. A rewrite replaces the history entry
//! rather than adding one, so Back leaves the page instead of undoing choices one by one.
//!
//! A link value the page cannot use falls back to the default, and a note on the page says which
//! value and what was shown instead ([`PageLink::notes`]).

use crate::logic::link::Link;
use leptos::prelude::*;
use wasm_bindgen::JsValue;

#[derive(Clone, Copy)]
pub struct PageLink {
    link: RwSignal<Link>,
    /// What in the opened link could not be used.
    pub notes: RwSignal<Vec<String>>,
}

impl PageLink {
    /// Reads the address bar's hash and makes the link available to every tab.
    pub fn provide() -> PageLink {
        let hash = window().location().hash().unwrap_or_default();
        let page = PageLink { link: RwSignal::new(Link::parse(&hash)), notes: RwSignal::new(Vec::new()) };
        Effect::new(move |_| {
            let hash = page.link.with(Link::to_hash);
            if let Ok(history) = window().history() {
                let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&format!("#{hash}")));
            }
        });
        provide_context(page);
        page
    }

    pub fn get() -> PageLink {
        expect_context::<PageLink>()
    }

    /// The tab the link names (untracked: read once, when the page opens).
    pub fn tab(&self) -> String {
        self.link.with_untracked(|l| l.tab.clone())
    }

    /// A new tab: its slug replaces the old one and the old tab's choices go.
    pub fn set_tab(&self, slug: &str) {
        if self.link.with_untracked(|l| l.tab != slug) {
            self.link.set(Link { tab: slug.to_string(), params: Vec::new() });
        }
    }

    /// The link's `key` read by `parse`; when it is absent, `default`; when `parse` refuses it,
    /// `default` and a note naming the value and `shown` (how the default reads on the page).
    pub fn choice<T>(&self, key: &str, parse: impl Fn(&str) -> Option<T>, default: T, shown: &str) -> T {
        let Some(value) = self.raw(key) else { return default };
        parse(&value).unwrap_or_else(|| {
            self.note(format!("the link's {key}={value:?} is not one of this tab's choices; showing {shown}"));
            default
        })
    }

    /// The link's raw `key`, for choices checked later (a list that arrives from the bridge).
    pub fn raw(&self, key: &str) -> Option<String> {
        self.link.with_untracked(|l| l.get(key).map(str::to_string))
    }

    /// Records a choice, which the address bar then shows.
    pub fn set(&self, key: &str, value: &str) {
        if self.link.with_untracked(|l| l.get(key) != Some(value)) {
            self.link.update(|l| l.set(key, value));
        }
    }

    pub fn note(&self, note: String) {
        self.notes.update(|n| n.push(note));
    }
}
