//! Reusable UI pieces the substrate tabs build on; each is shown on generated data in the
//! Components tab.

pub mod chart;
pub mod heatmap;
pub mod number_input;
pub mod step_controls;
pub mod timeline;
pub mod virtual_table;

pub use chart::{BarChart, LineChart};
pub use heatmap::Heatmap;
pub use number_input::NumberInput;
pub use step_controls::StepControls;
pub use timeline::Timeline;
pub use virtual_table::VirtualTable;

#[cfg(test)]
mod tests;
