"""`triton.backends`: the names scripts import from it (`backends.compiler.GPUTarget`), and
`backends`, Triton's table of installed backends (torch's inductor finds the active GPU
driver through it)."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

from ..runtime.driver import ActiveDriver
from . import compiler  # noqa: F401
from .compiler import BaseBackend  # noqa: F401


class Backend(NamedTuple):
    """One installed backend: its compiler class and its driver class."""

    compiler: Any
    driver: Any


backends: Dict[str, Backend] = {"nvidia": Backend(compiler.CUDABackend, ActiveDriver)}
