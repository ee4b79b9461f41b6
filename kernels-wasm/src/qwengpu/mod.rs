//! qwenGPU: a 4-lane SIMT machine (FACTS §2). `isa` defines what a lane can do, `interp` is the
//! reference interpreter every other executor of the machine is checked against; `ptx` and
//! `lower` take clang's PTX to the machine's ROM blocks; `suite` is the kernel suite. The
//! compiled layers start with `deltanet` (Qwen3.5's Gated DeltaNet in f32) and `memory` (its
//! weights computed so that its state rows are the machine's memory, exactly) and `alu` (Qwen3.5
//! MLP sublayers computing 32-bit add/sub/logic exactly); `pipeline` composes them, a register
//! file in DeltaNet state feeding the adder, token by token.

/// Needs `std`'s f32 exp/ln/sqrt, like the Qwen3 model (native and browser).
#[cfg(feature = "std")]
pub mod alu;
#[cfg(feature = "std")]
pub mod alu_units;
#[cfg(feature = "std")]
pub mod compiled;
#[cfg(feature = "std")]
pub mod control;
#[cfg(feature = "std")]
pub mod deltanet;
pub mod interp;
pub mod isa;
pub mod lower;
#[cfg(feature = "std")]
pub mod memory;
#[cfg(feature = "std")]
pub mod net;
#[cfg(feature = "std")]
pub mod pipeline;
pub mod ptx;
#[cfg(feature = "std")]
pub mod run;
pub mod suite;
#[cfg(feature = "std")]
pub mod units;

#[cfg(test)]
mod interp_tests;
