"""Reads SASS (nvdisasm's text) for a hazard of Hopper's asynchronous wgmma: an instruction
between a HGMMA and the WARPGROUP.DEPBAR that completes it touching the HGMMA's accumulator
registers, or writing its register `a` fragment, or a HGMMA whose `a` fragment lies in an
accumulator still being written. ptxas was seen to emit such code for a zero accumulator
passed as tied inputs (stop 26)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import List, Optional, Set, Tuple

_REG = re.compile(r"\bR(\d+)\b")
_HGMMA = re.compile(r"HGMMA\.64x(\d+)x\d+\.(\w+)\.\w+(?:\.\w+)?\s+R(\d+),\s*(?:R(\d+)|gdesc)")
_INSTR = re.compile(r"/\*[0-9a-f]+\*/\s+(.*?)\s*;")


def find_nvdisasm() -> Optional[str]:
    """`NVDISASM`, else where tiles' knob finds it (TRITON_NVDISASM_PATH, pip's
    nvidia-cuda-nvdisasm, PATH)."""
    from tiles import knobs

    return os.environ.get("NVDISASM") or knobs.nvidia.nvdisasm.path


def sass_of(ptxas: str, nvdisasm: str, ptx: str, arch: str = "sm_90a") -> str:
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run([ptxas, f"-arch={arch}", src, "-o", cubin], check=True, capture_output=True)
        return subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True, text=True).stdout


def _accumulators(n: int, dtype: str) -> int:
    per_thread = 64 * n // 128
    return per_thread // 2 if dtype == "F16" else per_thread


def hazards(sass: str) -> List[str]:
    found: List[str] = []
    in_flight: List[Tuple[str, Set[int], Set[int]]] = []  # (HGMMA, accumulators, `a` fragment)
    for line in sass.splitlines():
        m = _INSTR.search(line)
        if not m:
            continue
        ins = m.group(1)
        if "WARPGROUP.DEPBAR" in ins:
            in_flight = []
            continue
        h = _HGMMA.search(ins)
        if h:
            d0 = int(h.group(3))
            acc = set(range(d0, d0 + _accumulators(int(h.group(1)), h.group(2))))
            a = set(range(int(h.group(4)), int(h.group(4)) + 4)) if h.group(4) else set()
            if a & acc or any(a & prev for _, prev, _ in in_flight):
                found.append(f"`a` fragment inside an accumulator being written: {ins}")
            in_flight.append((ins, acc, a))
            continue
        if not in_flight or "WARPGROUP" in ins:
            continue
        regs = {int(r) for r in _REG.findall(ins)}
        dest = _REG.findall(ins.split(",")[0]) if "," in ins else []
        for h_ins, acc, a in in_flight:
            if regs & acc:
                found.append(f"touches an in-flight accumulator: {ins} (after {h_ins})")
                break
            if dest and int(dest[0]) in a:
                found.append(f"writes an in-flight `a` fragment: {ins} (after {h_ins})")
                break
    return found
