"""Where Triton keeps its native extension (`triton._C`): the pieces scripts import from it."""
