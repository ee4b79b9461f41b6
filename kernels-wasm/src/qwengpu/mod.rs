//! qwenGPU: a 4-lane SIMT machine (FACTS §2). `isa` defines what a lane can do, `interp` is the
//! reference interpreter every other executor of the machine is checked against.

pub mod interp;
pub mod isa;
pub mod lower;
pub mod ptx;
pub mod suite;

#[cfg(test)]
mod interp_tests;
