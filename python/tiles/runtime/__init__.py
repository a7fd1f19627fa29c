"""Runtime: the JIT decorator and launcher, the CUDA driver layer, the interpreter."""

from ..errors import InterpreterError, OutOfResources  # noqa: F401  (`triton.runtime.OutOfResources`)
from . import (  # noqa: F401  (`triton.runtime.driver.active`; loads no CUDA library)
    cache,  # noqa: E402,F401  (`triton.runtime.cache`: tiles' cache and Triton's file-cache API)
    driver,
    errors,
)
from .autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .cache import RedisRemoteCacheBackend, RemoteCacheBackend  # noqa: E402,F401
from .jit import JITFunction, KernelInterface, MockTensor, TensorWrapper, reinterpret  # noqa: F401
