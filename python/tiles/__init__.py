"""tiles: a GPU tile-kernel compiler for the Triton language, with a Rust core.

`import tiles as triton; import tiles.language as tl` runs Triton kernels unchanged.
"""

from __future__ import annotations

from . import (
    _C,  # noqa: F401 -- `triton._C.libtriton`, which tools reach by attribute
    backends,  # noqa: F401
    knobs,  # noqa: F401
    language,  # noqa: F401
    testing,  # noqa: F401,E402
    tools,  # noqa: F401
)
from .compiler import CompiledKernel, compile, compile_many  # noqa: F401
from .core import _aggregate as aggregate  # noqa: F401
from .core import constexpr  # noqa: F401
from .errors import (  # noqa: F401
    CompilationError,
    DeviceAssertionError,
    InterpreterError,
    LaunchError,
    OutOfBoundsError,
    OutOfResources,
    TilesError,
    TritonError,  # noqa: F401
)
from .runtime._allocation import set_allocator  # noqa: F401
from .runtime.async_compile import AsyncCompileMode, FutureKernel  # noqa: F401
from .runtime.autotuner import Config, autotune, heuristics  # noqa: F401
from .runtime.jit import (  # noqa: F401
    JITFunction,
    KernelInterface,  # noqa: F401
    MockTensor,
    TensorWrapper,
    constexpr_function,
    jit,
    must_use_result,
    reinterpret,
)

# The Triton release whose language and runtime API tiles implements: libraries that check
# `triton.__version__` (after `import tiles as triton`) take their current code paths.
# tiles' own version is `TILES_VERSION` (and the package's metadata).
__version__ = "3.6.0"
TILES_VERSION = "0.1.0"


def use_as_triton() -> bool:
    """Makes `import triton` (and every `triton.<module>`) load tiles from now on, so code
    written for Triton runs unchanged; `TILES_AS_TRITON=1` does it when Python starts. False
    if Triton itself was already imported (it stays)."""
    from . import _as_triton

    return _as_triton.install()


def cdiv(x: int, y: int) -> int:
    """Ceiling division of two Python ints."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, and 0 for n <= 0 (as Triton's: code sizes a block of
    width 0 with it and then skips that block)."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


__all__ = ["autotune", "heuristics", "Config", "testing", "jit", "JITFunction", "compile", "compile_many",
           "CompiledKernel", "CompilationError", "DeviceAssertionError", "OutOfBoundsError", "InterpreterError",
           "LaunchError", "constexpr",
           "cdiv", "next_power_of_2", "language", "set_allocator", "tools", "reinterpret",
           "TensorWrapper", "OutOfResources", "TilesError", "TritonError", "constexpr_function", "must_use_result",
           "AsyncCompileMode", "FutureKernel", "MockTensor", "aggregate", "use_as_triton"]
