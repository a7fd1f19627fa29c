"""`import triton` as tiles, for running code written for Triton unchanged.

`tiles.use_as_triton()` (or `TILES_AS_TRITON=1` in the environment, read when Python starts
through the `tiles_as_triton.pth` the wheel installs) puts a finder first on `sys.meta_path`:
from then on `triton` and every `triton.<sub>` module import as tiles' module of the same path
(`triton.language.extra.libdevice` is `tiles.language.extra.libdevice`). A `triton` module that
was already imported is left alone, so call it before the code under test imports Triton.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Optional


class _TritonAsTiles(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name != "triton" and not name.startswith("triton."):
            return None
        real = "tiles" + name[len("triton"):]
        try:
            if importlib.util.find_spec(real) is None and real not in sys.modules:
                return None
        except (ImportError, ValueError):
            if real not in sys.modules:
                return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module("tiles" + spec.name[len("triton"):])
        # The import machinery stamps the `triton...` spec on the module it gets (and an empty
        # `__path__` on a plain module such as tiles.language, which lets `triton.language.extra`
        # import through it); exec_module puts tiles' own spec back.
        self._saved[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        spec = self._saved.pop(module.__spec__.name, None)
        if spec is not None:
            module.__spec__ = spec

    def __init__(self) -> None:
        self._saved: dict = {}


def install() -> bool:
    """Makes `import triton...` load tiles from now on; False if Triton was already imported
    (that module stays)."""
    if any(isinstance(f, _TritonAsTiles) for f in sys.meta_path):
        return True
    if "triton" in sys.modules and not getattr(sys.modules["triton"], "__name__", "").startswith("tiles"):
        return False
    sys.meta_path.insert(0, _TritonAsTiles())
    return True
