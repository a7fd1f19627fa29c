"""`triton.compiler.errors`: the exceptions a failed compile raises."""

from ..errors import CompilationError, CompileTimeAssertionFailure, TilesError

UnsupportedLanguageConstruct = CompilationError

__all__ = ["CompilationError", "CompileTimeAssertionFailure", "TilesError", "UnsupportedLanguageConstruct"]
