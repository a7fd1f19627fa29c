"""`triton.runtime.errors`: the runtime's exceptions."""

from ..errors import CompilationError, InterpreterError, LaunchError, OutOfBoundsError, OutOfResources  # noqa: F401
