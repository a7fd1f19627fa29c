//! `passes`: analyses and transforms over `tile_ir` kernels.
//!
//! - [`axis_info`]: contiguity, divisibility and constancy of integer and pointer tiles;
//! - [`layouts`]: layout assignment with coalescing (128-bit accesses where proven safe);
//! - [`simplify`]: constant folding, CSE, DCE;
//! - [`software_pipeline`]: `cp.async` rings for the loads that feed dots;
//! - [`carried_pointers`]: loop-carried pointer tiles as one carried offset;
//! - [`pipeline`]: the passes in order, with a hook to dump the IR after each.
//!
//! Architecture invariant: passes rewrite `tile_ir` only; no LLVM, no Python. Analyses keep
//! their facts in side tables and never write them into the IR, except the layouts and
//! vector widths that are the point of the layout pass.
#![deny(missing_docs)]
#![allow(clippy::needless_range_loop)]

pub mod axis_info;
pub mod carried_layouts;
pub mod carried_pointers;
pub mod fp8_dots;
pub mod layouts;
pub mod pipeline;
pub mod simplify;
pub mod software_pipeline;

pub use pipeline::{run_pass, run_pipeline, PassError, PipelineOptions, RunPassError, PASS_NAMES};

/// Whether shape ops (`permute`, `reshape`, `join`, `split`) whose elements stay in their
/// threads are assembled from registers instead of through shared memory, and layout
/// assignment asks their operands for layouts that allow it. On unless
/// `TILES_SHAPE_OPS_IN_REGISTERS=0`. Read on every use, so a process may switch it.
pub fn shape_ops_in_registers() -> bool {
    std::env::var("TILES_SHAPE_OPS_IN_REGISTERS").map_or(true, |v| v != "0")
}
