"""`triton._utils`: helpers over nested argument lists that tools import (torch's inductor
finds the attributes of a specialisation with them)."""

from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple


def find_paths_if(iterable: Any, pred: Callable[[Tuple[int, ...], Any], bool]) -> List[Tuple[int, ...]]:
    """The paths (tuples of indices) of the leaves of nested lists and tuples for which
    `pred(path, leaf)` holds."""
    out: List[Tuple[int, ...]] = []

    def visit(path: Tuple[int, ...], x: Any) -> None:
        if isinstance(x, (list, tuple)):
            for i, y in enumerate(x):
                visit(path + (i,), y)
        elif pred(path, x):
            out.append(path)

    visit((), iterable)
    return out


def get_iterable_path(iterable: Any, path: Sequence[int]) -> Any:
    """The element of nested lists and tuples at `path`."""
    for i in path:
        iterable = iterable[i]
    return iterable
