"""`triton.backends.compiler`: the target description `compile` takes."""

from ..runtime.driver import GPUTarget  # noqa: F401
