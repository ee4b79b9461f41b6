//! qwenGPU: a 4-lane SIMT machine (FACTS §2). `isa` defines what a lane can do, `interp` is the
//! reference interpreter every other executor of the machine is checked against; `ptx` (with
//! `inline` for device functions), `select` and `lower` take clang's PTX to the machine's ROM
//! blocks; `args` lays out a launch's arguments (and the kernel's own variables) as people write
//! them; `suite` is the kernel suite; `carry` counts what each step would carry in tokens
//! if a language model ran it (issue #22's bound), and `limbs` is the second machine's arithmetic:
//! words as 8-bit limbs in scalar channels, added and compared by SwiGLU layers exactly in f32,
//! with `limb_bits` for the bitwise operations and shifts and `limb_mul` for `mul`;
//! `limb_alu` stacks them all side by side, one lane's ALU; `soft_div` turns division into a
//! routine of other instructions for a machine without a divider (the second machine's case);
//! `machine_tokens` is the hop between positions: VAL and record tokens' embeddings and the head
//! that samples them; `layout` orders the second machine's ROM so that its lanes, which
//! reconverge at the lowest PC, merge at the joins, and `sequencer` is what its layers must
//! compute to name each next record.
//!
//! The compiled machine: `deltanet` is Qwen3.5's Gated DeltaNet in f32, `memory` and `alu` argue
//! why chosen weights make its state rows and its MLPs exact; `net` is the residual stream of
//! one-hot groups and the executor's schedule, `mlp` the AND-unit MLP, `head` the DeltaNet head
//! as state rows;
//! `units` and `alu_units` build word circuits (chains, multiplier, divider, shifts, shuffles);
//! `rom` encodes instructions as ROM rows; `control` (with `control_rows`) is the SIMT sequencer;
//! `compiled` assembles the layers and `run` drives them token by token in lockstep with the
//! interpreter.

/// Needs `std`'s f32 exp/ln/sqrt, like the Qwen3 model (native and browser).
#[cfg(feature = "std")]
pub mod alu;
#[cfg(feature = "std")]
pub mod alu_units;
pub mod args;
#[cfg(feature = "std")]
pub mod awake;
pub mod carry;
#[cfg(feature = "std")]
pub mod compiled;
#[cfg(feature = "std")]
pub mod control;
#[cfg(feature = "std")]
pub mod control_rows;
#[cfg(feature = "std")]
pub mod deltanet;
#[cfg(feature = "std")]
pub mod exec;
#[cfg(feature = "std")]
pub mod head;
mod inline;
pub mod interp;
pub mod isa;
mod layout;
#[cfg(feature = "std")]
pub mod limb_alu;
#[cfg(feature = "std")]
pub mod limb_bits;
#[cfg(feature = "std")]
pub mod limb_memory;
#[cfg(feature = "std")]
pub mod limb_mul;
#[cfg(feature = "std")]
pub mod limbs;
pub mod lower;
mod lower_bits;
#[cfg(feature = "std")]
pub mod machine_tokens;
#[cfg(feature = "std")]
pub mod memory;
#[cfg(feature = "std")]
pub mod mlp;
#[cfg(feature = "std")]
pub mod net;
#[cfg(feature = "std")]
pub mod next_record;
#[cfg(feature = "std")]
pub mod pc_rows;
pub mod program_image;
pub mod ptx;
#[cfg(feature = "std")]
pub mod register_file;
#[cfg(feature = "std")]
pub mod results;
#[cfg(feature = "std")]
pub mod rom;
#[cfg(feature = "std")]
pub mod run;
mod select;
pub mod sequencer;
#[cfg(feature = "std")]
pub mod slot_counter;
mod soft_div;
#[cfg(feature = "std")]
pub mod splice;
pub mod suite;
#[cfg(feature = "std")]
pub mod units;
mod wide;

#[cfg(test)]
mod interp_tests;
