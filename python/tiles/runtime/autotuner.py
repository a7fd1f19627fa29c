"""`@autotune`, `Config` and `@heuristics`, with Triton's names and semantics.

The autotuner benchmarks every (pruned) config the first time it sees a key, keeps the fastest
per key in memory and on disk, and skips a config that fails to compile or to launch (with a
message), never crashing on it. `TILES_PRINT_AUTOTUNING=1` prints progress and the choice.
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import AutotunerError, OutOfResources, PTXASError  # noqa: F401  (Triton exports these here)
from .jit import KernelInterface, compile_only, compiled_only, env_setting


def _compile_failure(r: Any) -> bool:
    """Whether a config's compile result is a failure autotuning skips (a compile error, a failed
    static_assert, too many resources, ptxas refusing it) rather than one it raises."""
    from ..errors import CompilationError

    return isinstance(r, (CompilationError, OutOfResources, PTXASError))


class Config:
    """One point of an autotuning space: meta-parameters and launch options."""

    def __init__(self, kwargs: Dict[str, Any], num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: Optional[int] = None, pre_hook: Optional[Callable] = None,
                 ir_override: Optional[str] = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        # Triton's hand-written IR for this config (a .ttgir/.llir/.ptx file): tiles has no use
        # for it and refuses a config that names one when it launches.
        self.ir_override = ir_override

    def all_kwargs(self) -> Dict[str, Any]:
        if self.ir_override is not None:
            raise NotImplementedError(f"tiles cannot load Triton IR overrides (ir_override={self.ir_override!r})")
        out = dict(self.kwargs, num_warps=self.num_warps, num_stages=self.num_stages)
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        return out

    def __str__(self) -> str:
        parts = [f"{k}: {v}" for k, v in self.kwargs.items()]
        parts += [f"num_warps: {self.num_warps}", f"num_stages: {self.num_stages}"]
        if self.maxnreg is not None:
            parts.append(f"maxnreg: {self.maxnreg}")
        return ", ".join(parts)

    __repr__ = __str__


def _printing() -> bool:
    from .jit import env_flag

    return env_flag("PRINT_AUTOTUNING")


# What the screen's estimate of a short kernel can be off by: a launch through the autotuner's
# Python path can leave the GPU idle between the events (tens of microseconds). Measured on
# flash-linear-attention's 278 configs (11 choices, H200): a margin of 1.5x alone dropped the
# best of one choice (a 37 us kernel whose screen read 71 us); with 20 us more, no choice
# changed and 46 configs were left out of the full timing.
_SCREEN_SLACK_MS = 0.02


def _screen_ratio() -> float:
    """`TILES_AUTOTUNE_SCREEN`: how many times slower than the fastest config a config may
    screen and still be timed in full (default 1.5); 0 (or off) times every config."""
    v = env_setting("AUTOTUNE_SCREEN")
    if v is None:
        return 1.5
    if v.strip().lower() in ("", "0", "off", "false", "no", "n"):
        return 0.0
    try:
        ratio = float(v)
    except ValueError:
        raise ValueError(f"TILES_AUTOTUNE_SCREEN={v!r}: expected a ratio such as 1.5, or 0 for off") from None
    if ratio < 1:
        raise ValueError(f"TILES_AUTOTUNE_SCREEN={v!r}: a ratio below 1 would time no config")
    return ratio


def _key_part(v: Any) -> Any:
    if hasattr(v, "dtype") and (hasattr(v, "data_ptr") or hasattr(v, "__array_interface__")):
        return str(v.dtype)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


# A dtype's text, as the key holds it (numpy's `str(dtype)` costs ~1.5 us; asked on every launch).
_DTYPE_TEXT: Dict[Any, str] = {}

# Argument types that carry no dtype.
_PLAIN = frozenset((int, float, bool, str, type(None)))


def _hashable(v: Any) -> Any:
    try:
        hash(v)
        return v
    except TypeError:  # numpy arrays as key arguments (the interpreter)
        return _key_part(v)


def _zero(v: Any) -> None:
    if hasattr(v, "zero_"):
        v.zero_()
    else:
        v[...] = 0


def _copy(v: Any) -> Any:
    return v.clone() if hasattr(v, "clone") else v.copy()


def _restore(dst: Any, src: Any) -> None:
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


def _one_line(text: str) -> str:
    """A report on one line: where (a compile error's first line) and why (its last)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()] or [""]
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"


class Autotuner(KernelInterface):
    """Triton's `Autotuner`, with its constructor, attributes and hooks, so code that subclasses
    it (caching tuners that fill `cache`, hooks replaced after `__init__`) works unchanged.

    `pre_hook(kwargs, reset_only=False)` and `post_hook(kwargs, exception)` run around every
    benchmarked launch: by default they zero `reset_to_zero` and restore `restore_value`
    arguments (skipping arguments passed as None); a user's hook replaces the default, as in
    Triton. `cache` maps Triton's key (the `key` arguments' values, then the dtype of every
    argument that has one) to the chosen Config."""

    _first_failure = None  # (config, exception) of the first config skipped while choosing

    def __init__(self, fn, arg_names: Sequence[str], configs: Sequence[Config], key: Sequence[str],
                 reset_to_zero: Optional[Sequence[str]] = None, restore_value: Optional[Sequence[str]] = None,
                 pre_hook: Optional[Callable] = None, post_hook: Optional[Callable] = None,
                 prune_configs_by: Optional[Dict[str, Any]] = None, warmup: Optional[int] = None,
                 rep: Optional[int] = None, use_cuda_graph: bool = False, do_bench: Optional[Callable] = None,
                 cache_results: bool = True):
        self.fn = fn
        self.base_fn = fn
        while not inspect.isfunction(self.base_fn) and hasattr(self.base_fn, "fn"):
            self.base_fn = self.base_fn.fn
        self.arg_names = list(arg_names)
        self.configs = list(configs) if configs else [Config({})]
        self.keys = list(key)
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.restore_copies: Dict[str, Any] = {}
        self.pre_hook: Callable = lambda kwargs, reset_only=False: 0
        self.post_hook: Callable = lambda kwargs, exception: 0
        self.user_defined_pre_hook = self.user_defined_post_hook = False
        if pre_hook:
            self.pre_hook, self.user_defined_pre_hook = pre_hook, True
        elif self.reset_to_zero or self.restore_value:
            self.pre_hook = self._default_pre_hook
        if post_hook:
            self.post_hook, self.user_defined_post_hook = post_hook, True
        elif self.restore_value:
            self.post_hook = self._default_post_hook
        prune = prune_configs_by or {}
        self.perf_model = prune.get("perf_model")
        self.configs_top_k = prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        self.num_warmups = 25 if warmup is None else warmup  # Triton's attribute names
        self.num_reps = 100 if rep is None else rep
        self.use_cuda_graph = use_cuda_graph  # accepted; tiles times with events either way
        self.user_do_bench = do_bench
        self.cache_results = cache_results
        self.cache: Dict[Any, Config] = {}
        self.nargs: Optional[Dict[str, Any]] = None
        self.best_config: Optional[Config] = None
        self.configs_timings: Dict[Config, float] = {}
        self.bench_time = 0.0
        self.__name__ = getattr(fn, "__name__", "kernel")

    def _default_pre_hook(self, kwargs: Dict[str, Any], reset_only: bool = False) -> None:
        for name in self.reset_to_zero:
            if kwargs.get(name) is not None:
                _zero(kwargs[name])
        if not reset_only:
            self.restore_copies = {n: _copy(kwargs[n]) for n in self.restore_value if kwargs.get(n) is not None}

    def _default_post_hook(self, kwargs: Dict[str, Any], exception: Optional[BaseException]) -> None:
        for name, saved in self.restore_copies.items():
            _restore(kwargs[name], saved)
        self.restore_copies = {}

    def _runs_compiled(self) -> bool:
        """Whether the tuned kernel runs compiled on the GPU (a JITFunction, not interpreted):
        what compiling ahead and screening are for."""
        from .jit import interpreting

        base = self._jit_function()
        return base is not None and not interpreting(base)

    def _jit_function(self):
        """The JITFunction under this tuner's wrappers (heuristics, another tuner), if any."""
        from .jit import JITFunction

        base = self.fn
        while not isinstance(base, JITFunction) and hasattr(base, "fn"):
            base = base.fn
        return base if isinstance(base, JITFunction) else None

    # -- the disk copy of the choices ----------------------------------------------------------------
    def _disk_path(self, key, configs: List[Config]) -> Optional[str]:
        from . import cache

        base = self._jit_function()
        if base is None or not cache.enabled():
            return None
        h = hashlib.sha256(f"{cache.VERSION}{cache.function_fingerprint(base)}{key!r}{configs!r}".encode())
        return os.path.join(cache.cache_dir(), "autotune", h.hexdigest() + ".json")

    def _load_choice(self, key, configs: List[Config]) -> Optional[Config]:
        path = self._disk_path(key, configs) if self.cache_results else None
        if not path:
            return None
        try:
            with open(path) as f:
                i = json.load(f)["index"]
            cfg = self.configs[i]
            return cfg if cfg in configs else None
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None

    def _save_choice(self, key, configs: List[Config], cfg: Config) -> None:
        from .cache import _atomic_write

        path = self._disk_path(key, configs) if self.cache_results else None
        if not path or cfg not in self.configs:
            return
        try:
            _atomic_write(path, json.dumps({"index": self.configs.index(cfg), "config": str(cfg)}).encode())
        except OSError:
            pass

    @property
    def do_bench(self) -> Callable:
        """Triton's `Autotuner.do_bench`: the timing function, `do_bench(fn, quantiles=...)` (the
        user's where `autotune(do_bench=...)` gave one), for subclasses that time configs."""
        if self.user_do_bench is not None:
            return self.user_do_bench
        from ..testing import do_bench

        return lambda fn, quantiles=None: do_bench(fn, warmup=self.num_warmups, rep=self.num_reps,
                                                   quantiles=quantiles)

    def check_disk_cache(self, tuning_key, configs: Sequence[Config], bench_fn: Callable[[], Any]) -> bool:
        """Triton's hook for subclasses: True where the choice for `tuning_key` among `configs`
        is on disk (then in `cache`); else runs `bench_fn` (which fills `cache[tuning_key]`)
        and stores what it chose. Configs with a pre_hook are never stored, as in Triton."""
        configs = list(configs)
        if not tuning_key or any(c.pre_hook for c in configs):
            bench_fn()
            return False
        key = tuple(_key_part(k) for k in (tuning_key if isinstance(tuning_key, tuple) else (tuning_key,)))
        cfg = self._load_choice(key, configs)
        if cfg is not None:
            self.cache[tuning_key] = cfg
            return True
        bench_fn()
        if tuning_key in self.cache:
            self._save_choice(key, configs, self.cache[tuning_key])
        return False

    # -- tuning ---------------------------------------------------------------------------------------
    def prune_configs(self, kwargs: Dict[str, Any], nargs: Optional[Dict[str, Any]] = None) -> List[Config]:
        """Triton's pruning: `early_config_prune(configs, named_args, **kwargs)` (positional
        arguments by name, then the launch's keywords), then the `perf_model`'s `top_k`."""
        nargs = nargs if nargs is not None else (self.nargs or {})
        configs = self.configs
        if self.early_config_prune:
            configs = list(self.early_config_prune(self.configs, nargs, **kwargs))
            if not configs:
                raise AutotunerError("Autotuner error: No valid autotuner configs after pruning. "
                                     "`early_config_prune` should return at least one config.")
        if self.perf_model and len(configs) > 1:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            est = {c: self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs}
            configs = sorted(configs, key=lambda c: est[c])[:top_k]
        return configs

    def _bench(self, *args, config: Config, **meta) -> List[float]:
        """Triton's `_bench`, as subclasses call it (FlagGems' LibTuner): `config`'s median,
        20th and 80th percentile times in ms (each `inf` where it fails to compile or launch)
        for a launch with `args` and the keywords `meta` (`grid` among them)."""
        grid = meta.pop("grid", None)
        meta.pop("warmup", None)
        nargs = self.nargs if self.nargs is not None else dict(zip(self.arg_names, args))
        return self._time_config(config, args, meta, grid, nargs, quantiles=(0.5, 0.2, 0.8))

    def _time_config(self, cfg: Config, args, kwargs, grid, nargs, quick: bool = False, warmup_ms: float = 0.0,
                     quantiles: Optional[Tuple[float, ...]] = None) -> Any:
        """`cfg`'s time in ms (`inf` where it fails to compile or launch): `do_bench`'s (or the
        user's `do_bench`), or with `quick` the screen's estimate (`testing._screen`, after
        `warmup_ms` of runs). With `quantiles`, a list of those quantiles of the times."""
        from ..testing import _screen

        conflicts = set(cfg.kwargs) & set(kwargs)
        if conflicts:
            raise ValueError(f"conflicting meta-parameters {sorted(conflicts)}: given both at launch and in a Config")
        full = {**nargs, **kwargs, **cfg.all_kwargs()}

        def call():
            if cfg.pre_hook:
                cfg.pre_hook(full)
            self.pre_hook(full)
            try:
                self.fn.run(*args, grid=grid, **kwargs, **cfg.all_kwargs())
            except Exception as e:
                self.post_hook(full, exception=e)
                raise
            self.post_hook(full, exception=None)

        from .jit import _tuning

        qs = quantiles or (0.5, 0.2, 0.8)
        _tuning.active = True
        try:
            if quick:
                return _screen(call, warmup_ms=warmup_ms)
            if self.user_do_bench is None and not self._runs_compiled():
                # The interpreter: one timed run a config. Its host-clock times say little
                # about the GPU, and do_bench's repeats (3 to 100 runs) made a debugging run of
                # an autotuned kernel take its number of configs times that long.
                t0 = time.perf_counter()
                call()
                times = [(time.perf_counter() - t0) * 1e3] * len(qs)
            else:
                t = self.do_bench(call, quantiles=qs)
                times = [float(x) for x in t] if isinstance(t, (list, tuple)) else [float(t)] * len(qs)
        except Exception as e:  # a config that does not compile or launch is skipped, not fatal
            times = [self._skip(cfg, e)] * len(qs)
        finally:
            _tuning.active = False
        return times if quantiles is not None else times[0]

    def _skip(self, cfg: Config, e: Exception) -> float:
        """Reports a config that failed to compile or launch and returns its time, `inf`.
        Configs beyond the GPU's resources or failing a static_assert are skipped quietly, as
        Triton does; others (or all, with TILES_PRINT_AUTOTUNING=1) are reported."""
        from ..errors import CompileTimeAssertionFailure

        if self._first_failure is None:
            self._first_failure = (cfg, e)
        out_of_resources = isinstance(e, OutOfResources) or "out of resource" in str(e).lower()
        if _printing() or not (out_of_resources or isinstance(e, CompileTimeAssertionFailure)):
            msg = f"tiles autotune: {self.__name__}: skipping config [{cfg}]: {type(e).__name__}: {e}"
            print(msg if _printing() else _one_line(msg), file=sys.stderr)
        return float("inf")

    def _key(self, all_args: Dict[str, Any]):
        """Triton's key: the `key` arguments' values, then every argument's dtype (on every
        launch: numbers are passed over without asking them for a dtype)."""
        key = [_hashable(all_args[k]) for k in self.keys if k in all_args]
        get = all_args.get
        for name in self.arg_names:
            v = get(name)
            if type(v) not in _PLAIN:
                dt = getattr(v, "dtype", None)
                if dt is not None:
                    try:
                        text = _DTYPE_TEXT.get(dt)
                        if text is None:
                            text = _DTYPE_TEXT[dt] = str(dt)
                    except TypeError:  # a dtype that does not hash
                        text = str(dt)
                    key.append(text)
        return tuple(key)

    def run(self, *args, grid=None, **kwargs):
        if grid is None:
            raise TypeError(f"{self.__name__}: launch it as kernel[grid](...)")
        self.nargs = nargs = dict(zip(self.arg_names, args))
        all_args = {**nargs, **kwargs}
        if len(self.configs) == 1:
            cfg = self.configs[0]  # nothing to choose (Triton neither prunes nor times it)
        else:
            key = self._key(all_args)
            cfg = self.cache.get(key)
            if cfg is None:
                cfg = self.cache[key] = self._choose(args, kwargs, grid, all_args)
        self.best_config = cfg
        cfg_kwargs = cfg.all_kwargs()
        if cfg.pre_hook:  # also under compile-only: a hook may set what compiles (a descriptor's block)
            cfg.pre_hook({**all_args, **cfg_kwargs})
        try:
            # Through `fn[grid]`: a JITFunction's native dispatcher launches the chosen config
            # without the Python launcher once it has seen it.
            return self.fn[grid](*args, **kwargs, **cfg_kwargs)
        finally:
            self.nargs = None

    def _choose(self, args, kwargs, grid, all_args) -> Config:
        """The config for a key not seen in this process: the disk's choice among the configs
        that pruning keeps (pruning runs first, so its hooks see every new key, as in Triton),
        else the fastest of them."""
        stable_key = tuple(_key_part(all_args[k]) for k in self.keys if k in all_args)
        pruned = self.prune_configs(kwargs, self.nargs)
        if compile_only():
            return self._choose_compiled_only(pruned, args, kwargs, grid)
        cfg = self._load_choice(stable_key, pruned)
        if cfg is not None:
            if _printing():
                print(f"tiles autotune: {self.__name__} key {stable_key}: cached choice [{cfg}]", file=sys.stderr)
            return cfg
        t0 = time.perf_counter()
        self._first_failure = None
        failed = self._compile_ahead(pruned, args, kwargs, grid)
        timings, contenders = self._screen([c for c in pruned if c not in failed], args, kwargs, grid)
        timings.update(failed)
        # A subclass's own `_bench` (Triton's form) times the configs, as Triton's `run` calls it.
        own_bench = type(self)._bench is not Autotuner._bench
        for c in contenders:
            if own_bench:
                t = self._bench(*args, config=c, grid=grid, **kwargs)
                timings[c] = float(t[0] if isinstance(t, (list, tuple)) else t)
            else:
                timings[c] = self._time_config(c, args, kwargs, grid, self.nargs)
            if _printing():
                print(f"tiles autotune: {self.__name__} [{c}]: {timings[c]:.4f} ms", file=sys.stderr)
        self.bench_time = time.perf_counter() - t0
        ok = {c: timings[c] for c in contenders if timings[c] != float("inf")}
        if not ok:
            self._every_config_failed()
        cfg = builtins.min(ok, key=ok.get)
        self.configs_timings = timings
        # The benchmarks' effects do not leak into the real run.
        self.pre_hook({**all_args, **cfg.all_kwargs()}, reset_only=True)
        self._save_choice(stable_key, pruned, cfg)
        if _printing():
            print(f"tiles autotune: {self.__name__} key {stable_key}: chose [{cfg}] after "
                  f"{self.bench_time:.2f} s", file=sys.stderr)
        return cfg

    def _choose_compiled_only(self, configs: List[Config], args, kwargs, grid) -> Config:
        """Under `TILES_COMPILE_ONLY`: every config compiles, after its `pre_hook` (which may set
        a descriptor's block shape); none is timed, and the first that compiled stands. A
        config that fails to compile (a failed static_assert, too many resources) is skipped
        as a timed autotune skips it; if all fail, an AutotunerError names the first."""
        self._first_failure = None
        out = self._compile_all(configs, args, dict(kwargs, grid=grid), nargs=self.nargs or {})
        compiled = []
        for c, r in zip(configs, out):
            if _compile_failure(r):
                self._skip(c, r)
            elif isinstance(r, Exception):
                raise r
            else:
                compiled_only(r)
                compiled.append(c)
        if not compiled:
            self._every_config_failed()
        return compiled[0]

    def _every_config_failed(self):
        """Raises the AutotunerError for a key none of whose configs ran, naming the first failure."""
        first = self._first_failure
        if first is None:
            raise AutotunerError(f"tiles autotune: every config of {self.__name__} failed")
        raise AutotunerError(f"tiles autotune: every config of {self.__name__} failed; the first, [{first[0]}]: "
                             f"{_one_line(f'{type(first[1]).__name__}: {first[1]}')}") from first[1]

    def _screen(self, configs: List[Config], args, kwargs, grid):
        """Screens `configs` before the full timing: each runs a few times (`testing._screen`:
        its fastest run; the first config after 10 ms of runs that bring the GPU to its
        clocks; a config over the margin is screened a second time, after the others), and
        only those within `TILES_AUTOTUNE_SCREEN` times (1.5 by default) of the fastest, plus
        20 us (`_SCREEN_SLACK_MS`), go on to `do_bench`'s timing, which then chooses among
        them. A config that slow in the screen does not win the full timing, and the full
        timing of each config is most of a first call's autotuning (125 ms a config by
        default). Returns (timings so far: each screened-out config's estimate, `inf` for
        failures; the configs to time). Not with a user's `do_bench`, for two configs or
        fewer, or in the interpreter; `TILES_AUTOTUNE_SCREEN=0` times every config, as Triton
        does."""
        ratio = _screen_ratio()
        if not ratio or self.user_do_bench is not None or len(configs) <= 2 or not self._runs_compiled():
            return {}, list(configs)
        # The first config runs for 10 ms first: an idle GPU's clocks would make it look slow.
        screens = {c: self._time_config(c, args, kwargs, grid, self.nargs, quick=True,
                                        warmup_ms=10.0 if i == 0 else 0.0)
                   for i, c in enumerate(configs)}
        inf = float("inf")
        best = builtins.min(screens.values())
        limit = ratio * best + _SCREEN_SLACK_MS
        # A config over the margin is screened once more, after the others (a transient, such as
        # the clocks, must not drop it), and keeps the lower estimate.
        for c, t in screens.items():
            if t != inf and t > limit:
                screens[c] = builtins.min(t, self._time_config(c, args, kwargs, grid, self.nargs, quick=True))
        best = builtins.min(screens.values())
        limit = ratio * best + _SCREEN_SLACK_MS
        timings = {c: t for c, t in screens.items() if t == inf or t > limit}
        if _printing():
            for c, t in timings.items():
                if t != inf:
                    print(f"tiles autotune: {self.__name__} [{c}]: screened out at {t:.4f} ms "
                          f"(the fastest screened {best:.4f} ms)", file=sys.stderr)
        return timings, [c for c in configs if c not in timings]

    def _compiles_ahead(self, configs: List[Config]) -> bool:
        """Whether `configs` compile all at once on the compile pool's threads: this thread runs
        their frontends, one after another, and the pool the rest of each compile (passes, LLVM,
        PTX, the driver's cubin and the module's load, without the GIL). Not for a single
        config, in the interpreter, inside the caller's own AsyncCompileMode (which has the
        compiles already), or with `TILES_AUTOTUNE_COMPILE_AHEAD=0`."""
        from . import async_compile
        from .jit import env_true

        switch = env_setting("AUTOTUNE_COMPILE_AHEAD")
        if len(configs) < 2 or async_compile.active_mode() is not None or (switch is not None and not env_true(switch)):
            return False
        return self._runs_compiled()

    def _compile_all(self, configs: List[Config], args, kwargs, nargs: Optional[Dict[str, Any]] = None) -> list:
        """`fn.warmup` of each config, on the compile pool (`_compiles_ahead`): the compiled
        kernels, or for a config that fails, its error (an exception instance). With `nargs`
        (the launch's arguments by name), each config's `pre_hook` runs first, as before its
        timed launches: a hook that sets a tensor descriptor's block shape decides what
        compiles."""
        from ..compiler import _pool
        from .async_compile import AsyncCompileMode, FutureKernel

        meta = {k: v for k, v in kwargs.items() if k != "grid"}
        done: list = []
        with AsyncCompileMode(_pool(os.cpu_count() or 1), ignore_errors=True):
            for c in configs:
                try:
                    if nargs is not None and c.pre_hook:
                        c.pre_hook({**nargs, **meta, **c.all_kwargs()})
                    done.append(self.fn.warmup(*args, **kwargs, **c.all_kwargs()))
                except Exception as e:  # noqa: BLE001 -- the caller decides
                    done.append(e)
        out = []
        for d in done:
            try:
                out.append(d.result() if isinstance(d, FutureKernel) else d)
            except Exception as e:  # noqa: BLE001
                out.append(e)
        return out

    def _compile_ahead(self, configs: List[Config], args, kwargs, grid) -> Dict[Config, float]:
        """Compiles the configs about to be timed all at once before timing any
        (`_compiles_ahead`); each would otherwise compile at its first timed launch, one after
        another, as in Triton. The timed launches then find them compiled. Returns the configs
        that failed to compile (a compile error, a failed static_assert, too many resources),
        reported and timed `inf` without a second compile; a config that fails otherwise is left
        to its timed launch, which reports it as before."""
        if not self._compiles_ahead(configs):
            return {}
        out = self._compile_all(configs, args, dict(kwargs, grid=grid), nargs=self.nargs or {})
        return {c: self._skip(c, r) for c, r in zip(configs, out) if _compile_failure(r)}

    def warmup(self, *args, **kwargs):
        """Compiles every config that pruning keeps for these arguments, without launching or
        timing (Triton's `Autotuner.warmup`), all at once on the compile pool's threads, and
        returns the compiled kernels, in the configs' order; the first config that fails raises
        its error. Inside `AsyncCompileMode` they compile on its executor and this returns their
        `FutureKernel`s."""
        nargs = dict(zip(self.arg_names, args))
        meta = {k: v for k, v in kwargs.items() if k != "grid"}  # what run() would hand the pruning
        return self._warm(self.prune_configs(meta, nargs), args, kwargs)

    def _warm(self, configs: List[Config], args, kwargs) -> list:
        """Compiles `configs` for a warmup's arguments (`kwargs` with its grid), as `warmup` does."""
        if not self._compiles_ahead(configs):
            return [self.fn.warmup(*args, **kwargs, **c.all_kwargs()) for c in configs]
        out = self._compile_all(configs, args, kwargs)
        for r in out:
            if isinstance(r, Exception):
                raise r
        return out

    def warmup_configs(self, *args, **kwargs):
        return [self.fn.warmup(*args, **kwargs, **c.all_kwargs()) for c in self.configs]


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=True):
    """Benchmarks `configs` for each new value of the `key` arguments and launches the fastest."""

    def decorator(fn):
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)

    return decorator


class Heuristics(KernelInterface):
    def __init__(self, fn, arg_names: Sequence[str], values: Dict[str, Callable]):
        self.fn = fn
        self.arg_names = list(arg_names)
        self.values = values
        self.__name__ = getattr(fn, "__name__", "kernel")

    def run(self, *args, **kwargs):
        all_args = {**dict(zip(self.arg_names, args)), **kwargs}
        for name, f in self.values.items():
            kwargs[name] = f(all_args)
            all_args[name] = kwargs[name]
        grid = kwargs.pop("grid", None)
        if grid is None:
            return self.fn.run(*args, **kwargs)
        return self.fn[grid](*args, **kwargs)  # the native dispatcher, as in Autotuner.run

    def warmup(self, *args, **kwargs):
        all_args = {**dict(zip(self.arg_names, args)), **kwargs}
        for name, f in self.values.items():  # each value sees those before it, as in run()
            kwargs[name] = all_args[name] = f(all_args)
        return self.fn.warmup(*args, **kwargs)


def heuristics(values: Dict[str, Callable]):
    """Computes meta-parameters from the other arguments: `@heuristics({"EVEN": lambda a: a["n"] % 64 == 0})`."""

    def decorator(fn):
        return Heuristics(fn, fn.arg_names, values)

    return decorator
