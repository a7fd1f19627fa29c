//! The `tiles-opt` command (see `nvptx_codegen::tools`).

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((file, opts)) = args.split_last() else {
        eprintln!("{}", nvptx_codegen::tools::USAGE);
        return ExitCode::from(2);
    };
    let input = if file == "-" {
        let mut s = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut s) {
            eprintln!("error: reading stdin: {e}");
            return ExitCode::from(2);
        }
        s
    } else {
        match std::fs::read_to_string(file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: reading {file}: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let code = match nvptx_codegen::tools::tiles_opt(opts, &input) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("{file}: {msg}");
            ExitCode::FAILURE
        }
    };
    // LLVM prints what `TILES_LLVM_ARGS` asked for (`-time-passes`, `-stats`) at its shutdown.
    nvptx_codegen::tools::shutdown_llvm();
    code
}
