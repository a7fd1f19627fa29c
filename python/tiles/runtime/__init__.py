"""Runtime: the JIT decorator and launcher, the CUDA driver layer, the interpreter."""

from ..errors import InterpreterError, OutOfResources  # noqa: F401  (`triton.runtime.OutOfResources`)

# `triton.runtime.driver.active` (loading no CUDA library); `triton.runtime.cache`: tiles' kernel
# cache and Triton's file-cache API.
from . import cache, driver, errors  # noqa: F401
from .autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .cache import RedisRemoteCacheBackend, RemoteCacheBackend  # noqa: F401
from .jit import JITFunction, KernelInterface, MockTensor, TensorWrapper, reinterpret  # noqa: F401
