//! Gives the native module a build identity, so that kernel caches written by another build of
//! the compiler are never reused.

use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    for dir in [
        "src",
        "../tile_ir/src",
        "../passes/src",
        "../nvptx_codegen/src",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    println!("cargo:rustc-env=TILES_BUILD_ID={nanos:x}");
}
