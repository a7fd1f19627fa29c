//! Any text: the parser returns a kernel or a located error, never panics; a kernel it accepts
//! prints to text that parses back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(f) = tile_ir::parse(text) {
        let printed = f.to_string();
        let again = tile_ir::parse(&printed).expect("printed IR must parse");
        assert_eq!(again.to_string(), printed, "print -> parse -> print changed the text");
        let _ = tile_ir::verify(&f);
    }
});
