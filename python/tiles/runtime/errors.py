"""`triton.runtime.errors`: the runtime's exceptions."""

from ..errors import (  # noqa: F401
    AutotunerError,
    CompilationError,
    InterpreterError,
    LaunchError,
    OutOfBoundsError,
    OutOfResources,
    PTXASError,
)
from ..errors import TilesError as TritonError  # noqa: F401
