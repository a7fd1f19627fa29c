"""The allocator hook (`triton.set_allocator`, at Triton's module path).

Triton calls the allocator at launch for the global scratch memory of device-side tensor
descriptors. tiles lowers descriptors to plain loads and stores and needs no scratch, so the
allocator is only recorded; code that sets one, or resets it to `NullAllocator()`, runs as is.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Optional


class NullAllocator:
    """The allocator in place until one is set: asked for memory, it refuses."""

    def __call__(self, size: int, alignment: int, stream: Optional[int]) -> Any:
        raise RuntimeError("this kernel needs scratch memory at launch, and no allocator is set: "
                           "call tiles.set_allocator (triton.set_allocator)")


_NULL_ALLOCATOR = NullAllocator()
_allocator: ContextVar = ContextVar("_allocator", default=_NULL_ALLOCATOR)  # noqa: B039 (stateless)


def set_allocator(allocator: Any) -> None:
    """Records the allocator for this context (thread or task), as Triton does."""
    _allocator.set(allocator)
