"""Exceptions users see."""

from __future__ import annotations

from typing import Optional


class TilesError(Exception):
    """The base of tiles' own exceptions (`tiles.TritonError` names it too)."""


class CompilationError(TilesError):
    """A kernel could not be compiled. Shows the kernel's file, line and a caret."""

    def __init__(self, message: str, file: str = "<unknown>", line: int = 0, col: int = 0,
                 source_line: Optional[str] = None, kernel: str = ""):
        self.message, self.file, self.line, self.col = message, file, line, col
        self.error_message = message  # Triton's name for the message alone
        self.source_line, self.kernel = source_line, kernel
        where = f"{file}:{line}:{col + 1}" + (f" in {kernel}" if kernel else "")
        text = f"at {where}:\n"
        if source_line is not None:
            stripped = source_line.rstrip("\n")
            text += f"    {stripped}\n    {' ' * col}^\n"
        text += message
        super().__init__(text)


class CompileTimeAssertionFailure(CompilationError):
    """A `tl.static_assert` failed (an autotuner skips such configs quietly, as Triton's does)."""


class StaticAssertFailed(AssertionError):
    """Raised by `tl.static_assert`; the compiler reports it as CompileTimeAssertionFailure."""


class DeviceAssertionError(TilesError, AssertionError, RuntimeError):
    """A `tl.device_assert` (or a debug-mode overflow check) failed. An AssertionError, as
    Triton's interpreter raises, and a RuntimeError saying "device-side assert triggered", as a
    failed assert reaches Triton's users on the GPU; tiles' message also names the kernel, the
    line and the assert's message."""


class OutOfBoundsError(TilesError, IndexError):
    """The interpreter caught a load or store outside the buffer its pointer came from."""


class BadOptionError(TilesError, ValueError, AssertionError):
    """A compile option out of range (`num_warps=3`). A ValueError, and an AssertionError as
    Triton's check is (code written for Triton catches that)."""


class LaunchError(TilesError):
    """A kernel could not be launched (bad arguments, no GPU, driver error)."""


class HostMemoryError(LaunchError, ValueError):
    """A kernel argument lives in host memory the GPU cannot reach (a ValueError, as Triton
    raises for a CPU tensor)."""


class InterpreterError(TilesError):
    """An op failed while interpreting a kernel; names the kernel's line and program id."""


class ArgumentOverflowError(LaunchError, OverflowError):
    """An integer argument that no kernel parameter type holds (an OverflowError, as Triton's)."""


class OutOfResources(LaunchError):
    """A kernel needs more of a GPU resource (shared memory) than the GPU has (Triton's
    `triton.runtime.errors.OutOfResources`)."""

    def __init__(self, required: int, limit: int, name: str, kernel: Optional[str] = None):
        """`name` is the resource ("shared memory", "threads"), as in Triton; `kernel` the
        kernel that asked for it."""
        self.required, self.limit, self.name, self.kernel = required, limit, name, kernel
        hint = {"shared memory": " Reducing block sizes or `num_stages` may help.",
                "threads": " Reducing `num_warps` may help."}.get(name, "")
        where = f" (kernel {kernel})" if kernel else ""
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}{where}.{hint}")


class PTXASError(LaunchError):
    """The driver's PTX assembler rejected a kernel (Triton's `triton.runtime.errors.PTXASError`)."""


class AutotunerError(TilesError, RuntimeError):
    """Autotuning found no config that runs (Triton's `triton.runtime.errors.AutotunerError`)."""


# Triton's name for the base class (`triton.errors.TritonError`, `triton.compiler.errors.TritonError`).
TritonError = TilesError
