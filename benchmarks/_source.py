"""Imports a kernel module from source text, so that the same kernels run under tiles and Triton
(both need the source in a file: their decorators read it back)."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from types import ModuleType


def load_source(src: str, name: str) -> ModuleType:
    path = os.path.join(tempfile.mkdtemp(), f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m
