"""`triton.knobs`: settings scripts change from Python instead of the environment.

The ones tiles has a counterpart for read what tiles itself reads (so `knobs.runtime.interpret`
answers as the launcher decides, Triton's `TRITON_INTERPRET` included) and write tiles' own
setting; any other knob is kept, so scripts that set it run, and has no effect here.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Dict, List, Optional, Tuple


def _set_env(var: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value


def _env_setting(name: str) -> Optional[str]:
    from .runtime.jit import env_setting

    return env_setting(name)


def _code_setting_changed() -> None:
    """After a setting that changes compiled code: the native launch paths forget what they
    learned (they would launch code compiled under the old setting)."""
    from . import _tiles

    _tiles.forget_learned_launches()


def _flag(name: str, changes_code: bool = False) -> Tuple[Callable[[], Any], Callable[[Any], None]]:
    """A setting the runtime reads at each use through `env_flag(name)`."""

    def get() -> bool:
        from .runtime.jit import env_flag

        return env_flag(name)

    def put(v: Any) -> None:
        _set_env("TILES_" + name, None if v is None else ("1" if v else "0"))
        if changes_code:
            _code_setting_changed()

    return get, put


def _code_text(name: str) -> Tuple[Callable[[], Any], Callable[[Any], None]]:
    """A text setting that changes compiled code, read at each use from `TILES_<name>` (or
    Triton's name): `override_arch`, and `fp32_default` (`tl.dot`'s fp32 precision where a
    kernel names none)."""

    def put(v: Any) -> None:
        _set_env("TILES_" + name, None if v is None else str(v))
        _code_setting_changed()

    return (lambda: _env_setting(name) or None), put


def _fp_fusion(name: str, attr: str) -> Tuple[Callable[[], Any], Callable[[Any], None]]:
    """A fusion setting read once at import into `runtime.jit` (`attr`), from `TILES_<name>`:
    the default of `enable_fp_fusion`, and Triton's switch that turns fusion off everywhere."""
    import importlib

    jit = importlib.import_module(".runtime.jit", __package__)

    def put(v: Any) -> None:
        _set_env("TILES_" + name, None if v is None else ("1" if v else "0"))
        setattr(jit, attr, bool(v))
        _code_setting_changed()

    return lambda: getattr(jit, attr), put


class HookChain:
    """Triton's `knobs.HookChain`: hooks of one kind, called in the order added (`reversed`:
    the other way, as exit hooks are)."""

    def __init__(self, reversed: bool = False):
        self.calls: List[Callable[..., Any]] = []
        self.reversed = reversed

    def add(self, func: Callable[..., Any]) -> None:
        if func not in self.calls:
            self.calls.append(func)
            _hooks_changed()

    def remove(self, func: Callable[..., Any]) -> None:
        if func in self.calls:
            self.calls.remove(func)
            _hooks_changed()

    def copy(self) -> "HookChain":
        out = HookChain(self.reversed)
        out.calls = list(self.calls)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        for call in (reversed(self.calls) if self.reversed else list(self.calls)):
            call(*args, **kwargs)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, HookChain) and self.calls == other.calls and self.reversed == other.reversed

    __hash__ = None  # type: ignore[assignment]


# `knobs.runtime.launch_enter_hook` / `launch_exit_hook`: called with each launch's metadata (a
# `tiles.compiler.LazyDict`: name, function, stream, and the kernel's `launch_metadata`).
# `kernel_load_start_hook` / `kernel_load_end_hook(module, function, name, metadata_group, hash)`:
# around each module's load (as in Triton, chains that `add` and `remove` hooks).
# `kernel_unload_hook` is Triton's call as a kernel's module is unloaded; tiles keeps every
# loaded module for the life of the process, so its hooks never run (they may be added).
_CHAINS = {"launch_enter_hook": HookChain(), "launch_exit_hook": HookChain(reversed=True),
           "kernel_load_start_hook": HookChain(), "kernel_load_end_hook": HookChain(reversed=True),
           "kernel_unload_hook": HookChain()}
_LAUNCH_CHAINS = ("launch_enter_hook", "launch_exit_hook")


def _hooks_changed() -> None:
    """Routes launches through the knob hooks while any is set (the native path steps aside)."""
    import importlib

    jit = importlib.import_module(".runtime.jit", __package__)
    jit._knob_hooks_changed(any(_CHAINS[n].calls for n in _LAUNCH_CHAINS))


def _chain(name: str) -> Tuple[Callable[[], Any], Callable[[Any], None]]:
    def put(v: Any) -> None:
        chain = _CHAINS[name]
        if isinstance(v, HookChain):
            chain.calls = list(v.calls)
        elif v is None:
            chain.calls = []
        elif callable(v):  # Triton's older form: one hook assigned
            chain.calls = [v]
        else:
            raise TypeError(f"knobs.runtime.{name} takes a callable, a HookChain or None, got {v!r}")
        _hooks_changed()

    return lambda: _CHAINS[name], put


# knob group -> knob -> (read what tiles uses, set it)
_MAPPED: Dict[str, Dict[str, Tuple[Callable[[], Any], Callable[[Any], None]]]] = {
    "autotuning": {"print": _flag("PRINT_AUTOTUNING")},
    "runtime": {"interpret": _flag("INTERPRET"), "debug": _flag("DEBUG", changes_code=True),
                "launch_enter_hook": _chain("launch_enter_hook"), "launch_exit_hook": _chain("launch_exit_hook"),
                "kernel_load_start_hook": _chain("kernel_load_start_hook"),
                "kernel_load_end_hook": _chain("kernel_load_end_hook"),
                "kernel_unload_hook": _chain("kernel_unload_hook"),
                "override_arch": _code_text("OVERRIDE_ARCH")},
    "cache": {"dir": (lambda: os.environ.get("TILES_CACHE_DIR"),
                      lambda v: _set_env("TILES_CACHE_DIR", None if v is None else str(v)))},
    "language": {"fp32_default": _code_text("F32_DEFAULT"),
                 "default_fp_fusion": _fp_fusion("DEFAULT_FP_FUSION", "DEFAULT_FP_FUSION"),
                 "force_disable_fp_fusion": _fp_fusion("FORCE_DISABLE_FP_FUSION", "FORCE_NO_FP_FUSION")},
}


class _NvidiaTool:
    """`knobs.nvidia.ptxas` and the like: where the tool is (`TRITON_PTXAS_PATH`, a pip
    `nvidia-cuda-nvcc`, PATH, or an installed Triton's bundle; None when absent: tiles needs
    none unless `TILES_ASSEMBLER=ptxas`: the driver's JIT compiles PTX) and its CUDA version.
    Without the tool, `version` is the driver's CUDA version (its built-in assembler compiles
    tiles' PTX), or "12.0" (the PTX ISA 8.0 tiles emits) without a driver."""

    def __init__(self, name: str):
        self.name = name

    @property
    def path(self) -> Optional[str]:
        import glob
        import shutil

        env = os.environ.get(f"TRITON_{self.name.upper()}_PATH")
        if env:
            return env
        try:
            import nvidia

            for base in nvidia.__path__:
                hits = sorted(glob.glob(os.path.join(base, "**", "bin", self.name), recursive=True))
                if hits:
                    return hits[-1]
        except ImportError:
            pass
        found = shutil.which(self.name)
        if found:
            return found
        # Last, the copy an installed Triton bundles: found without importing Triton, and from an
        # imported one's spec (`TILES_AS_TRITON`'s alias is tiles itself, which bundles none).
        import importlib.util

        try:
            spec = importlib.util.find_spec("triton")
        except (ImportError, ValueError):  # ValueError: an imported `triton` without a spec
            spec = None
        if spec is not None and spec.origin:
            bundled = os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", self.name)
            if os.access(bundled, os.X_OK):
                return bundled
        return None

    @property
    def version(self) -> str:
        import re
        import subprocess

        path = self.path
        if path:
            try:
                out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
                m = re.search(r"release (\d+\.\d+)", out)
                if m:
                    return m.group(1)
            except (OSError, subprocess.SubprocessError):
                pass
        return _driver_cuda_version() or "12.0"


def _driver_cuda_version() -> Optional[str]:
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return None


class _Descriptor:
    """What `knob_descriptors` lists for a knob tiles reads: the environment variable behind it."""

    def __init__(self, key: str):
        self.key = key


# Settings tiles reads from `_kept` that read as None until set (Triton's defaults):
# `jit_cache_hook(key=, repr=, fn=, compile=, is_manual_warmup=, already_compiled=)` before a
# kernel compiles (a true result skips the compile and the launch), `jit_post_compile_hook`
# after; `compilation.listener(src=, metadata=, metadata_group=, times=, cache_hit=)` after each
# compile or disk-cache hit (`times` a `CompileTimes`).
_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "runtime": {"jit_cache_hook": None, "jit_post_compile_hook": None, "add_stages_inspection_hook": None},
    "compilation": {"listener": None},
    "build": {"impl": None},
}

# Triton 3.6's other knobs that read the environment: (variable, kind, default). Until set from
# Python they read as in Triton, so code that reads one (torch's inductor reads
# `knobs.nvidia.libdevice_path`) gets its value rather than an AttributeError. Of these, tiles
# acts on `compilation.always_compile` (no disk-cache hits); the rest concern Triton's own
# toolchain and have no effect here.
_TRITON_ENV: Dict[str, Dict[str, Tuple[str, str, Any]]] = {
    "compilation": {"override": ("TRITON_KERNEL_OVERRIDE", "bool", False),
                    "dump_ir": ("TRITON_KERNEL_DUMP", "bool", False),
                    "dump_ir_extract_di_local_variables": ("LLVM_EXTRACT_DI_LOCAL_VARIABLES", "bool", False),
                    "store_binary_only": ("TRITON_STORE_BINARY_ONLY", "bool", False),
                    "always_compile": ("TRITON_ALWAYS_COMPILE", "bool", False),
                    "use_ir_loc": ("USE_IR_LOC", "str", None),
                    "enable_asan": ("TRITON_ENABLE_ASAN", "bool", False),
                    "disable_line_info": ("TRITON_DISABLE_LINE_INFO", "bool", False),
                    "front_end_debugging": ("TRITON_FRONT_END_DEBUGGING", "bool", False),
                    "allow_non_constexpr_globals": ("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "bool", False),
                    "instrumentation_mode": ("TRITON_INSTRUMENTATION_MODE", "str", "")},
    "autotuning": {"cache": ("TRITON_CACHE_AUTOTUNING", "bool", False)},
    "build": {"cc": ("CC", "str", None), "cudacrt_path": ("TRITON_CUDACRT_PATH", "str", None),
              "cudart_path": ("TRITON_CUDART_PATH", "str", None)},
    "cache": {"home_dir": ("TRITON_HOME", "str", os.path.expanduser("~/")),
              "dump_dir": ("TRITON_DUMP_DIR", "str", None), "override_dir": ("TRITON_OVERRIDE_DIR", "str", None)},
    "nvidia": {"dump_nvptx": ("NVPTX_ENABLE_DUMP", "bool", False),
               "disable_ptxas_opt": ("DISABLE_PTXAS_OPT", "bool", False),
               "ptxas_options": ("PTXAS_OPTIONS", "str", None),
               "mock_ptx_version": ("TRITON_MOCK_PTX_VERSION", "str", None),
               "dump_ptxas_log": ("TRITON_DUMP_PTXAS_LOG", "bool", False),
               "libdevice_path": ("TRITON_LIBDEVICE_PATH", "str", None),
               "libcuda_path": ("TRITON_LIBCUDA_PATH", "str", None)},
    "proton": {"disable": ("TRITON_PROTON_DISABLE", "bool", False),
               "enable_nvtx": ("TRITON_ENABLE_NVTX", "bool", True)},
}


def _read_env(var: str, kind: str, default: Any) -> Any:
    from .runtime.jit import env_true

    text = os.environ.get(var)
    if text is None:
        return default
    return env_true(text) if kind == "bool" else text


class CompileTimes:
    """Triton's `knobs.CompileTimes`, what a compilation listener receives (microseconds): the
    frontend (`ir_initialization`), each later stage by name (`lowering_stages`), and the
    cache write (`store_results`)."""

    def __init__(self, ir_initialization: int, lowering_stages: List[Tuple[str, int]], store_results: int):
        self.ir_initialization = ir_initialization
        self.lowering_stages = lowering_stages
        self.store_results = store_results

    @property
    def total_lowering(self) -> int:
        return sum(t for _, t in self.lowering_stages)

    @property
    def total(self) -> int:
        return self.ir_initialization + self.total_lowering + self.store_results

    def __repr__(self) -> str:
        return (f"CompileTimes(ir_initialization={self.ir_initialization}, lowering_stages={self.lowering_stages}, "
                f"store_results={self.store_results})")


class base_knobs:  # noqa: N801  (Triton's name)
    """One group of knobs (`knobs.runtime`, `knobs.autotuning`, ...). As Triton's: `scope()`
    restores the group's settings on exit, `copy()` and `reset()` (back to the environment's
    values and the defaults) serve test fixtures."""

    def __init__(self, group: str = ""):
        object.__setattr__(self, "_mapped", _MAPPED.get(group, {}))
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_kept", {})

    @property
    def knob_descriptors(self) -> Dict[str, _Descriptor]:
        return {name: _Descriptor(_ENV_KEYS.get(name, "TILES_" + name.upper())) for name in self._mapped
                if name not in _CHAINS}

    def copy(self) -> "base_knobs":
        out = type(self)(self._group)
        out._kept.update(self._kept)
        return out

    def reset(self) -> "base_knobs":
        """Forgets the knobs set from Python (tools found on the machine stay)."""
        for k in [k for k, v in self._kept.items() if not isinstance(v, _NvidiaTool)]:
            del self._kept[k]
        return self

    @contextlib.contextmanager
    def scope(self):
        env = {d.key: os.environ.get(d.key) for d in self.knob_descriptors.values()}
        values = {}
        for n, (get, _) in self._mapped.items():
            v = get()
            values[n] = v.copy() if isinstance(v, HookChain) else v  # a chain is changed in place
        kept = dict(self._kept)
        try:
            yield self
        finally:
            for k, v in env.items():
                _set_env(k, v)
            for n, (get, put) in self._mapped.items():
                if get() != values[n]:  # a setting held outside the environment
                    put(values[n])
            self._kept.clear()
            self._kept.update(kept)

    def __getattr__(self, name: str) -> Any:
        if name in self._mapped:
            return self._mapped[name][0]()
        if name in self._kept:
            return self._kept[name]
        defaults = _DEFAULTS.get(self._group, {})
        if name in defaults:
            return defaults[name]
        env = _TRITON_ENV.get(self._group, {}).get(name)
        if env is not None:
            return _read_env(*env)
        raise AttributeError(f"knobs.{self._group} has no setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._mapped:
            self._mapped[name][1](value)
        else:
            self._kept[name] = value


# The environment variable behind each knob tiles reads (the rest are TILES_<KNOB>).
_ENV_KEYS = {"print": "TILES_PRINT_AUTOTUNING", "dir": "TILES_CACHE_DIR",
             "default_fp_fusion": "TILES_DEFAULT_FP_FUSION",
             "force_disable_fp_fusion": "TILES_FORCE_DISABLE_FP_FUSION", "fp32_default": "TILES_F32_DEFAULT"}
# Triton's switch for knobs writing through to the environment (tiles' always do).
propagate_env = True

autotuning = base_knobs("autotuning")
runtime = base_knobs("runtime")
cache = base_knobs("cache")
compilation = base_knobs("compilation")
language = base_knobs("language")
build = base_knobs("build")
nvidia = base_knobs("nvidia")
for _tool in ("ptxas", "cuobjdump", "nvdisasm"):
    nvidia._kept[_tool] = _NvidiaTool(_tool)
amd = base_knobs("amd")
proton = base_knobs("proton")


def refresh_knobs() -> None:
    """Triton's: reread the environment. tiles' knobs read it at each use; what the native
    launch paths learned is dropped, as the environment may have changed debug mode or the
    target, and the fusion settings are read again."""
    from .runtime import jit

    jit.DEFAULT_FP_FUSION = jit.env_flag("DEFAULT_FP_FUSION")
    jit.FORCE_NO_FP_FUSION = jit.env_flag("FORCE_DISABLE_FP_FUSION")
    _code_setting_changed()
