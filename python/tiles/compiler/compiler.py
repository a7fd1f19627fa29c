"""`triton.compiler.compiler`'s names, for code that reaches them through that module."""

from typing import Any

from ..errors import OutOfResources  # noqa: F401
from ..runtime.cache import get_cache_manager, get_dump_manager, get_override_manager, triton_key  # noqa: F401
from . import ASTSource, CompiledKernel, LazyDict, compile, max_shared_mem  # noqa: F401
from .errors import CompilationError  # noqa: F401


def __getattr__(name: str) -> Any:
    if name == "make_backend":
        from ..backends.compiler import make_backend

        return make_backend
    if name == "GPUTarget":  # read on use: the driver module need not load with `import tiles`
        from ..backends.compiler import GPUTarget

        return GPUTarget
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
