//! The pass pipeline, in the order it runs. Read top to bottom.

use crate::{
    axis_info, carried_layouts, carried_pointers, fp8_dots, layouts, simplify, software_pipeline,
};
use tile_ir::{verify, Function, VerifyErrors};

/// Why the pipeline stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PassError {
    /// The IR was invalid after the named pass (a compiler bug, or invalid input IR).
    #[error("after {pass}: {errors}")]
    Invalid {
        /// The pass after which verification failed ("input" before any).
        pass: &'static str,
        /// What the verifier found.
        errors: VerifyErrors,
    },
}

/// Options that shape the pipeline.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// Verify after every pass (always on in debug builds).
    pub verify_each: bool,
    /// Let `dot`s run on warpgroups (`wgmma`, `sm_90a`); `nvptx_codegen::compile` sets it
    /// from the target.
    pub warpgroup_mma: bool,
    /// Let fp64 `dot`s run on tensor cores (`mma.sync` f64, sm_80 and later);
    /// `nvptx_codegen::compile` sets it from the target. Without it they run on CUDA cores.
    pub f64_mma: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            verify_each: cfg!(debug_assertions),
            warpgroup_mma: false,
            f64_mma: false,
        }
    }
}

/// Runs every pass on `func`. `dump(pass, func)` is called after each, for stage dumps.
pub fn run_pipeline(
    func: &mut Function,
    options: &PipelineOptions,
    mut dump: impl FnMut(&'static str, &Function),
) -> Result<(), PassError> {
    let check = |pass: &'static str, f: &Function| -> Result<(), PassError> {
        verify(f).map_err(|errors| PassError::Invalid { pass, errors })
    };
    check("input", func)?;
    let mut step = |name: &'static str,
                    f: &mut Function,
                    run: &dyn Fn(&mut Function)|
     -> Result<(), PassError> {
        run(f);
        if options.verify_each {
            check(name, f)?;
        }
        dump(name, f);
        Ok(())
    };
    step("fold_constants", func, &|f| {
        simplify::fold_constants(f);
    })?;
    step("cse", func, &|f| {
        simplify::eliminate_common_subexpressions(f);
    })?;
    step("dce", func, &|f| {
        simplify::eliminate_dead_code(f);
    })?;
    step("fuse_dot_accumulation", func, &|f| {
        if simplify::fuse_dot_accumulation(f) > 0 {
            simplify::eliminate_dead_code(f);
        }
    })?;
    let (warpgroup_mma, f64_mma) = (options.warpgroup_mma, options.f64_mma);
    if warpgroup_mma {
        step("fp8_warpgroup_dots", func, &|f| {
            if fp8_dots::fp8_warpgroup_dots(f) > 0 {
                simplify::eliminate_dead_code(f);
            }
        })?;
    }
    step("assign_layouts", func, &|f| {
        let info = axis_info::analyze(f);
        layouts::assign_layouts_for(f, &info, warpgroup_mma, f64_mma);
    })?;
    step("cse_after_layouts", func, &|f| {
        simplify::eliminate_common_subexpressions(f);
        simplify::eliminate_dead_code(f);
    })?;
    step("carry_per_layout", func, &|f| {
        if carried_layouts::enabled() && carried_layouts::carry_per_layout(f) > 0 {
            simplify::eliminate_common_subexpressions(f);
            simplify::eliminate_dead_code(f);
        }
    })?;
    step("pipeline_loops", func, &|f| {
        if software_pipeline::pipeline_loops(f) > 0 {
            simplify::eliminate_common_subexpressions(f);
            simplify::eliminate_dead_code(f);
        }
    })?;
    step("rebase_carried_pointers", func, &|f| {
        if carried_pointers::enabled() && carried_pointers::rebase_carried_pointers(f) > 0 {
            simplify::eliminate_common_subexpressions(f);
            simplify::eliminate_dead_code(f);
        }
    })?;
    check("pipeline", func)
}

/// The passes that can be run one by one (`tiles-opt --passes=...`), in pipeline order.
pub const PASS_NAMES: [&str; 9] = [
    "fold_constants",
    "cse",
    "dce",
    "fuse_dot_accumulation",
    "fp8_warpgroup_dots",
    "assign_layouts",
    "carry_per_layout",
    "pipeline_loops",
    "rebase_carried_pointers",
];

/// Why a named pass could not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunPassError {
    /// No pass has this name.
    #[error(
        "unknown pass `{0}` (known: fold_constants, cse, dce, fuse_dot_accumulation, fp8_warpgroup_dots, assign_layouts, carry_per_layout, pipeline_loops, rebase_carried_pointers)"
    )]
    Unknown(String),
    /// The IR was invalid after the pass.
    #[error(transparent)]
    Invalid(#[from] PassError),
}

/// Runs one pass by name, then verifies.
pub fn run_pass(name: &str, func: &mut Function) -> Result<(), RunPassError> {
    match name {
        "fold_constants" => {
            simplify::fold_constants(func);
        }
        "cse" => {
            simplify::eliminate_common_subexpressions(func);
        }
        "dce" => {
            simplify::eliminate_dead_code(func);
        }
        "fuse_dot_accumulation" => {
            simplify::fuse_dot_accumulation(func);
        }
        "fp8_warpgroup_dots" => {
            fp8_dots::fp8_warpgroup_dots(func);
        }
        "assign_layouts" => {
            let info = axis_info::analyze(func);
            layouts::assign_layouts(func, &info);
        }
        "pipeline_loops" => {
            software_pipeline::pipeline_loops(func);
        }
        "carry_per_layout" => {
            carried_layouts::carry_per_layout(func);
        }
        "rebase_carried_pointers" => {
            carried_pointers::rebase_carried_pointers(func);
        }
        other => return Err(RunPassError::Unknown(other.to_string())),
    }
    verify(func).map_err(|errors| PassError::Invalid {
        pass: "named pass",
        errors,
    })?;
    Ok(())
}
