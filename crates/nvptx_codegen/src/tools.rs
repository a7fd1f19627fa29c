//! `tiles-opt`: run chosen passes on a kernel's text form and print the result, or emit LLVM IR
//! or PTX. The logic lives here, as a function, so file tests run it in process.
//!
//! ```text
//! tiles-opt [--passes=fold_constants,cse,dce,assign_layouts | --pipeline]
//!           [--emit=tir|llvm|ptx] [--target=sm_90a] [--fp-fusion]
//!           [--repeat=N] [--threads=K] FILE
//! ```
//!
//! `--threads=K` (with `--emit=llvm|ptx`) measures how the back end scales: the kernel's
//! LLVM and PTX stages `repeat` times on each of K threads at once, against the same K·repeat
//! one after another; the times go to stderr.

use crate::{generate_ptx_with, CodegenOptions, Target};

/// Usage text.
pub const USAGE: &str = "usage: tiles-opt [--passes=a,b,... | --pipeline] [--emit=tir|llvm|ptx] \
[--target=sm_80|sm_90|sm_90a] [--fp-fusion] [--repeat=N] [--threads=K] FILE";

/// Runs `tiles-opt` with `args` (without the program name or the file) on `input`; the
/// output text, or a message for the user.
pub fn tiles_opt(args: &[String], input: &str) -> Result<String, String> {
    let mut passes: Vec<String> = Vec::new();
    let mut pipeline = false;
    let mut emit = "tir".to_string();
    let mut target = "sm_90a".to_string();
    let mut explicit_target = false;
    let mut repeat = 1usize;
    let mut threads = 1usize;
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
        } else if a == "--keep-subnormals" {
            options.keep_subnormals = true;
        } else if let Some(n) = a.strip_prefix("--repeat=") {
            // Generates the LLVM IR or PTX `n` times in one process (for profiling: startup
            // and page faults of a fresh process otherwise dominate small kernels).
            repeat = positive_count("--repeat", n)?;
        } else if let Some(n) = a.strip_prefix("--threads=") {
            threads = positive_count("--threads", n)?;
        } else {
            return Err(format!("unknown option `{a}`\n{USAGE}"));
        }
    }
    let t = Target::parse(&target).map_err(|e| format!("error: {e}"))?;
    // The pipeline targets warpgroup MMA only where a target is named (file tests of the
    // mma.sync layouts run without one).
    let pipeline_options = passes::PipelineOptions {
        warpgroup_mma: explicit_target && t.has_warpgroup_mma(),
        f64_mma: explicit_target && t.has_f64_mma(),
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
            if threads > 1 {
                eprintln!("{}", scaling(threads, repeat, &generate)?);
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

fn positive_count(flag: &str, n: &str) -> Result<usize, String> {
    n.parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{flag} wants a positive count, got `{n}`"))
}

/// Runs `generate` `repeat` times on each of `threads` threads at once and the same count
/// on this thread; reports both wall times and the speed-up.
fn scaling<T>(
    threads: usize,
    repeat: usize,
    generate: &(impl Fn() -> Result<T, String> + Sync),
) -> Result<String, String> {
    use std::time::Instant;
    let start = Instant::now();
    for _ in 0..threads * repeat {
        generate()?;
    }
    let one_after_another = start.elapsed().as_secs_f64();
    let start = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..repeat {
                        generate()?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| "a worker thread panicked".to_string())?
        })
    })?;
    let at_once = start.elapsed().as_secs_f64();
    let per = |t: f64| t * 1e3 / (threads * repeat) as f64;
    Ok(format!(
        "threads={threads} repeat={repeat}: one after another {:.2} ms a compile, on {threads} \
threads {:.2} ms of wall a compile, speed-up {:.2}x",
        per(one_after_another),
        per(at_once),
        one_after_another / at_once
    ))
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

#[cfg(test)]
mod tests {
    use super::tiles_opt;

    const VECTOR_ADD: &str = include_str!("../../../tests/filetests/assign_layouts/vector_add.tir");

    fn run(args: &[&str]) -> Result<String, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tiles_opt(&args, VECTOR_ADD)
    }

    #[test]
    fn threads_measure_without_changing_the_output() {
        let one = run(&["--emit=ptx"]).unwrap();
        assert_eq!(
            run(&["--emit=ptx", "--threads=2", "--repeat=2"]).unwrap(),
            one
        );
        assert!(run(&["--emit=ptx", "--threads=0"])
            .unwrap_err()
            .contains("--threads wants a positive count"));
    }
}
