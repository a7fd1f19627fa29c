//! `tiles-opt`: run chosen passes on a kernel's text form and print the result, or emit LLVM IR
//! or PTX. The logic lives here, as a function, so file tests run it in process.
//!
//! ```text
//! tiles-opt [--passes=fold_constants,cse,dce,assign_layouts | --pipeline]
//!           [--emit=tir|llvm|ptx] [--target=sm_90a] [--fp-fusion] FILE
//! ```

use crate::{generate_ptx_with, CodegenOptions, Target};

/// Usage text.
pub const USAGE: &str = "usage: tiles-opt [--passes=a,b,... | --pipeline] [--emit=tir|llvm|ptx] \
[--target=sm_80|sm_90|sm_90a] [--fp-fusion] [--repeat=N] FILE";

/// Runs `tiles-opt` with `args` (without the program name or the file) on `input`; the
/// output text, or a message for the user.
pub fn tiles_opt(args: &[String], input: &str) -> Result<String, String> {
    let mut passes: Vec<String> = Vec::new();
    let mut pipeline = false;
    let mut emit = "tir".to_string();
    let mut target = "sm_90a".to_string();
    let mut explicit_target = false;
    let mut repeat = 1usize;
    let mut options = CodegenOptions::default();
    for a in args {
        if let Some(p) = a.strip_prefix("--passes=") {
            passes.extend(p.split(',').filter(|s| !s.is_empty()).map(str::to_string));
        } else if a == "--pipeline" {
            pipeline = true;
        } else if let Some(e) = a.strip_prefix("--emit=") {
            emit = e.to_string();
        } else if let Some(t) = a.strip_prefix("--target=") {
            target = t.to_string();
            explicit_target = true;
        } else if a == "--fp-fusion" {
            options.fp_fusion = true;
        } else if let Some(n) = a.strip_prefix("--repeat=") {
            // Generates the LLVM IR or PTX `n` times in one process (for profiling: startup
            // and page faults of a fresh process otherwise dominate small kernels).
            repeat = n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--repeat wants a positive count, got `{n}`"))?;
        } else {
            return Err(format!("unknown option `{a}`\n{USAGE}"));
        }
    }
    let t = Target::parse(&target).map_err(|e| format!("error: {e}"))?;
    // The pipeline targets warpgroup MMA only where a target is named (file tests of the
    // mma.sync layouts run without one).
    let pipeline_options = passes::PipelineOptions {
        warpgroup_mma: explicit_target && t.has_warpgroup_mma(),
        ..Default::default()
    };
    let mut func = tile_ir::parse(input).map_err(|e| format!("error: {e}"))?;
    tile_ir::verify(&func).map_err(|e| format!("error: {e}"))?;
    if pipeline {
        passes::run_pipeline(&mut func, &pipeline_options, |_, _| {})
            .map_err(|e| format!("error: {e}"))?;
    }
    for p in &passes {
        passes::run_pass(p, &mut func).map_err(|e| format!("error: {e}"))?;
    }
    match emit.as_str() {
        "tir" => Ok(func.to_string()),
        "llvm" | "ptx" => {
            if func.layouts.is_empty() {
                passes::run_pipeline(&mut func, &pipeline_options, |_, _| {})
                    .map_err(|e| format!("error: {e}"))?;
            }
            options.keep_llvm_ir = emit == "llvm";
            let generate =
                || generate_ptx_with(&func, &t, &options).map_err(|e| format!("error: {e}"));
            let mut out = generate()?;
            for _ in 1..repeat {
                out = generate()?;
            }
            Ok(if emit == "ptx" {
                out.ptx
            } else {
                out.llvm_ir.unwrap_or_default()
            })
        }
        other => Err(format!("unknown --emit `{other}`\n{USAGE}")),
    }
}

/// Releases LLVM's process-wide state; reports asked for through `TILES_LLVM_ARGS`
/// (`-time-passes`, `-stats`) are printed now. Call once, at the end of a tool's process: no
/// LLVM use may follow.
pub fn shutdown_llvm() {
    extern "C" {
        fn LLVMShutdown();
    }
    crate::drop_target_machines();
    // SAFETY: the tool's last LLVM call; nothing runs LLVM after it in this process.
    unsafe { LLVMShutdown() }
}
