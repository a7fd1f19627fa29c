//! Any text that parses and verifies goes through the passes and code generation without a
//! panic or an abort (errors are fine).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(mut f) = tile_ir::parse(text) else { return };
    if tile_ir::verify(&f).is_err() {
        return;
    }
    let target = nvptx_codegen::Target::parse("sm_90a").expect("known target");
    let _ = nvptx_codegen::compile(&mut f, &target, &Default::default(), |_, _| {});
});
