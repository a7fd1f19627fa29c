"""`triton.backends`, for the names scripts import from it (`backends.compiler.GPUTarget`)."""

from . import compiler  # noqa: F401
