"""`triton.knobs`: settings scripts change from Python instead of the environment.

The ones tiles has a counterpart for read and write that setting (an environment variable
tiles reads when it needs it); any other knob is kept, so scripts that set it run, and has no
effect here.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

# knob group -> knob -> (the environment variable tiles reads, its kind)
_MAPPED: Dict[str, Dict[str, Tuple[str, type]]] = {
    "autotuning": {"print": ("TILES_PRINT_AUTOTUNING", bool)},
    "runtime": {"interpret": ("TILES_INTERPRET", bool), "debug": ("TILES_DEBUG", bool)},
    "cache": {"dir": ("TILES_CACHE_DIR", str)},
    "language": {"default_fp_fusion": ("TILES_DEFAULT_FP_FUSION", bool)},
}


class _Knobs:
    """One group of knobs (`knobs.runtime`, `knobs.autotuning`, ...)."""

    def __init__(self, group: str):
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_kept", {})

    def __getattr__(self, name: str) -> Any:
        mapped = _MAPPED.get(self._group, {}).get(name)
        if mapped is not None:
            var, kind = mapped
            v = os.environ.get(var)
            if kind is bool:
                return v not in (None, "", "0")
            return v
        kept = object.__getattribute__(self, "_kept")
        if name in kept:
            return kept[name]
        raise AttributeError(f"knobs.{self._group} has no setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        mapped = _MAPPED.get(self._group, {}).get(name)
        if mapped is None:
            self._kept[name] = value
            return
        var, kind = mapped
        if value is None:
            os.environ.pop(var, None)
        elif kind is bool:
            os.environ[var] = "1" if value else "0"
        else:
            os.environ[var] = str(value)
        if var == "TILES_DEFAULT_FP_FUSION":
            from .runtime import jit

            jit.DEFAULT_FP_FUSION = bool(value)


autotuning = _Knobs("autotuning")
runtime = _Knobs("runtime")
cache = _Knobs("cache")
compilation = _Knobs("compilation")
language = _Knobs("language")
build = _Knobs("build")
nvidia = _Knobs("nvidia")
amd = _Knobs("amd")
proton = _Knobs("proton")
