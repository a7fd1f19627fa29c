#!/usr/bin/env bash
# Runs every test: Rust (fmt, clippy, unit + end-to-end), Python lint, and pytest against the
# installed wheel (GPU tests run only where a GPU is present; their CPU twins always run).
set -euo pipefail
cd "$(dirname "$0")/.."
export LLVM_SYS_221_PREFIX=/usr/lib/llvm-22
PTXAS="$(python3 - <<'PY'
import glob, os
try:
    import nvidia
    hits = sorted(glob.glob(os.path.join(nvidia.__path__[0], "**", "bin", "ptxas"), recursive=True))
    print(hits[-1] if hits else "")
except ImportError:
    print("")
PY
)"
export PTXAS
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test --quiet 2>&1 | tee /tmp/tiles-cargo-test.log | grep -E "^test result|FAILED|panicked"
# The Rust embedding example: builder -> PTX, no Python; ptxas must accept it.
cargo run --quiet -p nvptx_codegen --example vector_add sm_80 > /tmp/tiles-example.ptx
if [ -n "$PTXAS" ]; then "$PTXAS" -arch=sm_80 /tmp/tiles-example.ptx -o /tmp/tiles-example.cubin; fi
ruff check python tests benchmarks examples
cd tests && python3 -m pytest -q -p no:cacheprovider "$@"
