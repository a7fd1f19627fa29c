"""Where Triton keeps its native extension (`triton._C`): the pieces scripts import from it."""

from . import libtriton  # noqa: E402,F401
