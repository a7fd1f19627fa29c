"""`tiles.testing`: `do_bench`, `perf_report` and `Benchmark`, with Triton's names."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def _quantile(s: List[float], q: float) -> float:
    """The `q` quantile of the sorted `s`, interpolated linearly between ranks (as numpy's and
    torch's `quantile`, which Triton's `do_bench` follows)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantiles must be in [0, 1], got {q}")
    point = q * (len(s) - 1)
    lo = int(point)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (point - lo) * (s[hi] - s[lo])


def _summarise(times: List[float], quantiles, return_mode: str):
    if quantiles is not None:
        s = sorted(times)
        out = [_quantile(s, q) for q in quantiles]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return times
    return {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}[return_mode](times)


def do_bench(fn: Callable, warmup: int = 25, rep: int = 100, grad_to_none=None, quantiles=None,
             return_mode: str = "mean"):
    """Runs `fn` for about `warmup` ms, then times it for about `rep` ms with CUDA events,
    flushing the L2 cache before each run; returns milliseconds (or the asked quantiles).
    Without a GPU (the interpreter) it times with the host clock."""
    from .runtime.jit import env_flag

    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise ValueError(f"return_mode must be one of min, max, mean, median, all; got {return_mode!r}")
    torch = _torch()
    interpret = env_flag("INTERPRET")
    if torch is None or interpret:
        fn()
        t0 = time.perf_counter()
        fn()
        est = max((time.perf_counter() - t0) * 1e3, 1e-3)
        return _summarise(_timed_runs(fn, max(1, min(int(rep / est), 100))), quantiles, return_mode)
    cache = _l2_flusher(torch)
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) / 5, 1e-4)
    n_warmup, n_repeat = max(1, int(warmup / est)), max(1, int(rep / est))
    for _ in range(n_warmup):
        fn()
    return _summarise(_timed_runs(fn, n_repeat, torch, cache, grad_to_none), quantiles, return_mode)


def _l2_flusher(torch):
    """A 256 MB buffer whose `zero_()` evicts the L2 cache between timed runs."""
    return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def _timed_runs(fn: Callable, n: int, torch=None, cache=None, grad_to_none=None) -> List[float]:
    """The ms of each of `n` runs of `fn`: with `torch`, CUDA events around each run, after
    zeroing `cache` (`_l2_flusher`) and the gradients of `grad_to_none`; else the host clock."""
    if torch is None:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _screen(fn: Callable, runs: int = 5, warmup_ms: float = 0.0) -> float:
    """A quick estimate of `fn`'s time in ms, a lower bound: after one run (or runs for about
    `warmup_ms`, to bring an idle GPU to its clocks), the fastest of `runs` runs timed as
    `do_bench` times its runs (`_timed_runs`, with far fewer of them). The autotuner screens
    its configs with it."""
    torch = _torch()
    fn()
    if torch is not None and warmup_ms > 0:  # batches of 1, 2, 4, ... runs: a slow config runs about once
        t0, batch = time.perf_counter(), 1
        while (time.perf_counter() - t0) * 1e3 < warmup_ms:
            for _ in range(batch):
                fn()
            torch.cuda.synchronize()
            batch *= 2
    return min(_timed_runs(fn, runs, torch, _l2_flusher(torch) if torch is not None else None))


class Benchmark:
    """One benchmark of a `perf_report`: x values × lines. `x_vals` holds one value a row (for
    every name of `x_names`) or a tuple a row (one value a name)."""

    def __init__(self, x_names: Sequence[str], x_vals: Sequence[Any], line_arg: str, line_vals: Sequence[Any],
                 line_names: Sequence[str], plot_name: str, args: Optional[Dict[str, Any]] = None,
                 xlabel: str = "", ylabel: str = "", x_log: bool = False, y_log: bool = False,
                 styles=None, color=None):
        self.x_names, self.x_vals, self.line_arg = list(x_names), list(x_vals), line_arg
        self.line_vals, self.line_names, self.plot_name = list(line_vals), list(line_names), plot_name
        self.args = dict(args or {})
        self.xlabel, self.ylabel, self.x_log, self.y_log, self.styles = xlabel, ylabel, x_log, y_log, styles


class _Table:
    """The rows of a report where pandas is not installed: columns by name (`t["n"]`), `columns`,
    `to_string()` and `to_csv()`, the part of a DataFrame reports are read with."""

    def __init__(self, columns: List[str], rows: List[List[Any]]):
        self.columns, self.rows = list(columns), [list(r) for r in rows]

    def __getitem__(self, name: str) -> List[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def __setitem__(self, name: str, values: Sequence[Any]) -> None:
        self.columns.append(name)
        for r, v in zip(self.rows, values):
            r.append(v)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def shape(self):
        return (len(self.rows), len(self.columns))

    def to_string(self) -> str:
        cells = [[""] + self.columns] + [[str(i)] + [f"{v:.6g}" if isinstance(v, float) else str(v) for v in r]
                                          for i, r in enumerate(self.rows)]
        widths = [max(len(c[j]) for c in cells) for j in range(len(cells[0]))]
        return "\n".join(" ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)

    def to_csv(self, path: str, float_format: str = "%.6f", index: bool = False) -> None:
        def cell(v):
            return float_format % v if isinstance(v, float) else str(v)

        with open(path, "w") as f:
            f.write(",".join(self.columns) + "\n")
            for r in self.rows:
                f.write(",".join(cell(v) for v in r) + "\n")


def _frame(columns: List[str], rows: List[List[Any]]):
    try:
        import pandas as pd
    except ImportError:
        return _Table(columns, rows)
    return pd.DataFrame(rows, columns=columns)


class Mark:
    """A `perf_report`: `run()` calls the function once per x value and line, and prints,
    plots and saves the results as Triton's reports do (column `"<line> (<ylabel>)"`)."""

    def __init__(self, fn: Callable, benchmarks):
        self.fn = fn
        self.benchmarks = benchmarks

    def _run(self, bench: Benchmark, save_path: str, show_plots: bool, print_data: bool, diff_col: bool = False,
             save_precision: int = 6, **kwargs):
        x_names = list(bench.x_names)
        means = [f"{name} ({bench.ylabel})" for name in bench.line_names]
        rows, lows, highs = [], [], []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(x_names)
            if len(xs) != len(x_names):
                raise ValueError(f"Expected {len(x_names)} values, got {x}")
            row, low, high = list(xs), [], []
            for line in bench.line_vals:
                r = self.fn(**dict(zip(x_names, xs)), **{bench.line_arg: line}, **bench.args, **kwargs)
                # A function returns a value, or (value, min, max): the plot shades min to max.
                v, lo, hi = r if isinstance(r, (list, tuple)) and len(r) == 3 else (r, None, None)
                row.append(v)
                low.append(lo)
                high.append(hi)
            rows.append(row)
            lows.append(low)
            highs.append(high)
        if bench.plot_name:
            self._plot(bench, x_names, rows, lows, highs, means, save_path, show_plots)
        df = _frame(x_names + means, rows)
        if diff_col and len(x_names) + len(means) == 2:  # as Triton: the second column less the first
            df["Diff"] = [r[1] - r[0] for r in rows]
        if print_data:
            print(bench.plot_name + ":")
            print(df.to_string())
        if save_path:
            df.to_csv(os.path.join(save_path, f"{bench.plot_name}.csv"), float_format=f"%.{save_precision}f",
                      index=False)
        return df

    def _plot(self, bench: Benchmark, x_names, rows, lows, highs, means, save_path: str, show_plots: bool):
        try:
            import matplotlib

            if not show_plots:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:  # the table is still printed and saved
            return
        fig, ax = plt.subplots()
        xs = [r[0] for r in rows]  # the first x name is the plot's axis
        for i, label in enumerate(means):
            color = bench.styles[i][0] if bench.styles else None
            style = bench.styles[i][1] if bench.styles else None
            ax.plot(xs, [r[len(x_names) + i] for r in rows], label=label, color=color, ls=style)
            lo, hi = [lw[i] for lw in lows], [h[i] for h in highs]
            if all(v is not None for v in lo + hi):
                ax.fill_between(xs, [float(v) for v in lo], [float(v) for v in hi], alpha=0.15, color=color)
        ax.legend()
        ax.set_xlabel(bench.xlabel or x_names[0])
        ax.set_ylabel(bench.ylabel)
        ax.set_xscale("log" if bench.x_log else "linear")
        ax.set_yscale("log" if bench.y_log else "linear")
        if show_plots:
            plt.show()
        if save_path:  # made by run()
            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        plt.close(fig)

    def run(self, show_plots: bool = False, print_data: bool = False, save_path: str = "", return_df: bool = False,
            **kwargs):
        """Runs each benchmark; with `save_path`, writes `<plot_name>.csv`, `.png` and a
        `results.html` showing the plots; returns the tables with `return_df` (a pandas
        DataFrame each where pandas is installed). Other keywords go to the function."""
        single = isinstance(self.benchmarks, Benchmark)
        benches = [self.benchmarks] if single else list(self.benchmarks)
        if save_path:
            os.makedirs(save_path, exist_ok=True)
        tables = []
        try:
            for b in benches:
                tables.append(self._run(b, save_path, show_plots, print_data, **kwargs))
        finally:
            if save_path:
                with open(os.path.join(save_path, "results.html"), "w") as html:
                    html.write("<html><body>\n")
                    for b in benches[:len(tables)]:
                        html.write(f'<image src="{b.plot_name}.png"/>\n')
                    html.write("</body></html>\n")
        if return_df:
            return tables[0] if single else tables
        return None


def perf_report(benchmarks):
    """Decorates a function `f(**x, line_arg=..., **args) -> value` into a report with `.run()`."""
    return lambda fn: Mark(fn, benchmarks)


def do_bench_cudagraph(fn: Callable, rep: int = 20, grad_to_none=None, quantiles=None, return_mode: str = "mean"):
    """Times `fn` (Triton's CUDA-graph variant; here the same event timing as `do_bench`, whose
    launches cost a few microseconds)."""
    return do_bench(fn, warmup=max(rep // 4, 1), rep=rep, grad_to_none=grad_to_none, quantiles=quantiles,
                    return_mode=return_mode)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Asserts `x` and `y` (tensors, arrays or scalars) agree within `atol`/`rtol` (Triton's
    defaults: 1e-2 each)."""
    import numpy as np

    def host(v):
        if hasattr(v, "detach"):
            v = v.detach().float().cpu().numpy() if v.dtype.is_floating_point else v.detach().cpu().numpy()
        return np.asarray(v)

    a, b = host(x), host(y)
    atol = 1e-2 if atol is None else atol
    rtol = 1e-2 if rtol is None else rtol
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=err_msg, equal_nan=True)


# -- peak figures and clocks (Triton's helpers of the same names) ------------------------------


def nvsmi(attrs: Sequence[str]) -> List[int]:
    """GPU 0's `nvidia-smi --query-gpu` values for `attrs` (e.g. `["clocks.max.sm"]`), as ints."""
    import subprocess

    out = subprocess.check_output(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(attrs)}",
                                   "--format=csv,noheader,nounits"], text=True)
    return [int(float(v)) for v in out.strip().split(",")]


def _properties(device) -> Dict[str, int]:
    from .runtime import driver

    return driver.active.utils.get_device_properties(device)


def get_dram_gbps(device=None) -> float:
    """Peak DRAM bandwidth in GB/s: two transfers per memory clock over the bus."""
    p = _properties(device)
    return p["mem_clock_rate"] * 1e3 * 2 * p["mem_bus_width"] / 8 / 1e9


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "").replace("tl.", "")


def _capability_major() -> int:
    from .runtime import driver

    return driver.capability()[0] if driver.available() else 9


def get_max_tensorcore_tflops(dtype, clock_rate, device=None) -> float:
    """Peak tensor-core TFLOP/s at `clock_rate` (kHz, as `nvsmi(["clocks.max.sm"])[0] * 1e3`):
    four tensor cores per SM, each doing 256 (tf32), 512 (16-bit) or 1024 (8-bit) ops per clock."""
    name = _dtype_name(dtype)
    if _capability_major() < 8:
        if name != "float16":
            raise RuntimeError(f"tensor cores before Ampere take float16, not {name}")
        per_core = 256
    elif name in ("float32", "int32", "tf32"):
        per_core = 256
    elif name in ("float16", "bfloat16", "int16", "fp16", "bf16"):
        per_core = 512
    elif name in ("int8", "float8e4nv", "float8e5", "float8e4b15", "fp8e4nv", "fp8e5", "float8_e4m3fn",
                  "float8_e5m2"):
        per_core = 1024
    else:
        raise RuntimeError(f"no tensor-core rate for {name}")
    return _properties(device)["multiprocessor_count"] * 4 * clock_rate * per_core * 1e-9


def get_max_simd_tflops(dtype, clock_rate, device=None) -> float:
    """Peak CUDA-core (FMA) TFLOP/s at `clock_rate` (kHz): 32 fp32 or 64 fp16/bf16 ops per clock
    per SM quarter."""
    name = _dtype_name(dtype)
    if name == "float32":
        per_core = 32
    elif name == "float16" or name == "bfloat16" and _capability_major() >= 8:
        per_core = 64
    else:
        raise RuntimeError(f"no SIMD rate for {name}")
    return _properties(device)["multiprocessor_count"] * 4 * clock_rate * per_core * 1e-9


@contextlib.contextmanager
def set_gpu_clock(ref_sm_clock: int = 1350, ref_mem_clock: int = 1215):
    """Locks GPU 0's SM and memory clocks (MHz) with nvidia-smi (needs the rights to) and yields
    the (TFLOP/s, GB/s) those clocks give; the clocks are reset after."""
    import subprocess

    smi = ["nvidia-smi", "-i", "0"]
    try:
        subprocess.check_output(smi + ["-pm", "1"])
        subprocess.check_output(smi + [f"--lock-gpu-clocks={ref_sm_clock},{ref_sm_clock}"])
        subprocess.check_output(smi + [f"--lock-memory-clocks={ref_mem_clock},{ref_mem_clock}"])
        sm, mem = nvsmi(["clocks.current.sm", "clocks.current.memory"])
        if abs(sm - ref_sm_clock) >= 10 or abs(mem - ref_mem_clock) >= 10:
            raise RuntimeError(f"clocks are {sm} / {mem} MHz, not {ref_sm_clock} / {ref_mem_clock}")
        yield (get_max_tensorcore_tflops("float16", ref_sm_clock * 1e3), get_dram_gbps())
    finally:
        subprocess.run(smi + ["-pm", "0"], capture_output=True)
        subprocess.run(smi + ["-rgc"], capture_output=True)
        subprocess.run(smi + ["-rmc"], capture_output=True)


def cuda_memcheck(**target_kwargs):
    """Decorates a pytest test so that, for parameters matching `target_kwargs`, it reruns itself
    under NVIDIA's compute-sanitizer (memcheck) and fails on any error it reports; without the
    tool it runs the test as is. The test must take pytest's `request` fixture."""
    import functools
    import shutil
    import subprocess
    import sys

    def decorator(test_fn):
        @functools.wraps(test_fn)
        def wrapper(*args, **kwargs):
            tool = shutil.which("compute-sanitizer")
            if not tool or os.environ.get("TILES_UNDER_MEMCHECK") or not target_kwargs.items() <= kwargs.items():
                return test_fn(*args, **kwargs)
            node = kwargs["request"].node
            env = dict(os.environ, TILES_UNDER_MEMCHECK="1", PYTORCH_NO_CUDA_MEMORY_CACHING="1")
            r = subprocess.run([tool, "--tool", "memcheck", sys.executable, "-m", "pytest", "-q", node.nodeid],
                               capture_output=True, text=True, env=env)
            assert r.returncode == 0 and "ERROR SUMMARY: 0 errors" in r.stdout, r.stdout[-4000:]

        return wrapper

    return decorator
