"""`triton.compiler.errors`: the exceptions a failed compile raises."""

from ..errors import CompilationError, CompileTimeAssertionFailure, TilesError, TritonError

UnsupportedLanguageConstruct = CompilationError

__all__ = ["CompilationError", "CompileTimeAssertionFailure", "TilesError", "TritonError",
           "UnsupportedLanguageConstruct"]
