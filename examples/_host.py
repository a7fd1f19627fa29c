"""Host-side helpers for the examples: numpy in the interpreter, torch CUDA tensors on a GPU."""

from __future__ import annotations

import numpy as np

from tiles.runtime.jit import interpreting


class Host:
    def __init__(self, kernel):
        self.gpu = not interpreting(kernel)
        self.where = "GPU" if self.gpu else "interpreter (CPU, numpy)"

    def put(self, a: np.ndarray):
        if not self.gpu:
            return np.ascontiguousarray(a).copy()
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).cuda()

    def empty(self, shape, dtype):
        return self.put(np.zeros(shape, dtype))

    def get(self, t) -> np.ndarray:
        return t if not self.gpu else t.cpu().numpy()
