//! One 16-entry lookup table as the kernel stores it: each int16 entry split into the low-byte
//! and high-byte tables the byte shuffles read, how the entry is formed, and which are unused.

use crate::logic::bitnet::TableEntry;
use leptos::prelude::*;

#[component]
pub fn LutTable(title: String, entries: Vec<TableEntry>, current: u8, negate: bool) -> impl IntoView {
    view! {
        <figure class="lut-table" data-testid="lut-table">
            <figcaption>{title}</figcaption>
            <table>
                <thead>
                    <tr>
                        <th>"index"</th>
                        <th>"weights · int8 activations"</th>
                        <th>"int16"</th>
                        <th>"lo byte"</th>
                        <th>"hi byte"</th>
                    </tr>
                </thead>
                <tbody>
                    {entries
                        .into_iter()
                        .map(|e| {
                            let is_current = e.index == current;
                            let unused = e.formula.is_none();
                            let value = if is_current && negate {
                                format!("{} → −{} (sign bit)", e.value, e.value)
                            } else {
                                e.value.to_string()
                            };
                            view! {
                                <tr
                                    class:current=is_current
                                    class:unused=unused
                                    data-index=e.index
                                    data-current=is_current.to_string()
                                    data-value=e.value
                                >
                                    <td>{e.index}</td>
                                    <td>{e.formula.unwrap_or_else(|| "unused (no weight group maps here; stored 0)".into())}</td>
                                    <td>{value}</td>
                                    <td>{format!("{:#04x}", e.lo)}</td>
                                    <td>{format!("{:#04x}", e.hi)}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </figure>
    }
}
