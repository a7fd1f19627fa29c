"""Timing one benchmark case for one compiler: shared by the kernel benchmarks that compare
tiles with Triton on the same source."""

from __future__ import annotations

from typing import Any, Callable, Dict


def rel_err(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖, in float32."""
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def time_case(row: Dict[str, Any], name: str, run: Callable[[], None], err: Callable[[], float],
              flops: float) -> None:
    """Runs `run` once, then records under `row[f"{name}_..."]` its relative error (`err()`) and
    its median TFLOP/s over `triton.testing.do_bench`. A configuration the compiler cannot run
    records `{name}_error` instead."""
    import torch
    import triton.testing

    try:
        run()
        torch.cuda.synchronize()
    except Exception as e:  # a configuration a compiler cannot run
        row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:200]
        return
    row[f"{name}_rel_err"] = err()
    ms = triton.testing.do_bench(run, return_mode="median")
    row[f"{name}_tflops"] = flops / (ms * 1e-3) / 1e12


def ratio(row: Dict[str, Any]) -> str:
    """tiles' TFLOP/s over Triton's, as printed ("n/a" when either failed)."""
    t, r = row.get("tiles_tflops"), row.get("triton_tflops")
    return f"{t / r:.3f}x" if t and r else "n/a"
