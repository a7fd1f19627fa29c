"""Test helpers: run each language test in the interpreter and (with a GPU) compiled."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _gpu_available() -> bool:
    if os.environ.get("TILES_TEST_NO_GPU"):
        return False
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        from tiles.runtime import driver

        return driver.available()
    except Exception:
        return False


GPU = _gpu_available()

# Tests compile into a cache of their own, fresh for each session.
os.environ.setdefault("TILES_CACHE_DIR", __import__("tempfile").mkdtemp(prefix="tiles-test-cache-"))


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class Device:
    """Moves numpy arrays to where kernels in `mode` read them, and back."""

    def __init__(self, mode: str):
        self.mode = mode

    def put(self, a: np.ndarray):
        a = np.ascontiguousarray(a)
        if self.mode == "interpreter":
            return a.copy()
        import torch

        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).cuda()
        if a.dtype.name in ("float8_e5m2", "float8_e4m3fn"):
            fp8 = torch.float8_e5m2 if a.dtype.name == "float8_e5m2" else torch.float8_e4m3fn
            return torch.from_numpy(a.view(np.uint8).copy()).cuda().view(fp8)
        return torch.from_numpy(a.copy()).cuda()

    def addr(self, t) -> int:
        """The address kernels see for `t` (a value for tables of pointers)."""
        return t.ctypes.data if self.mode == "interpreter" else t.data_ptr()

    def get(self, t) -> np.ndarray:
        if self.mode == "interpreter":
            return t
        import torch

        t = t.cpu()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype in (torch.float8_e5m2, torch.float8_e4m3fn):
            import ml_dtypes

            fp8 = ml_dtypes.float8_e5m2 if t.dtype == torch.float8_e5m2 else ml_dtypes.float8_e4m3fn
            return t.view(torch.uint8).numpy().view(fp8)
        return t.numpy()


@pytest.fixture(params=["interpreter", pytest.param("gpu", marks=pytest.mark.gpu)])
def dev(request, monkeypatch):
    monkeypatch.setenv("TILES_INTERPRET", "1" if request.param == "interpreter" else "0")
    return Device(request.param)


def find_ptxas():
    # `PTXAS`, else where tiles' knob finds it (TRITON_PTXAS_PATH, pip's nvidia-cuda-nvcc, PATH).
    from tiles import knobs

    return os.environ.get("PTXAS") or knobs.nvidia.ptxas.path


@pytest.fixture(scope="session")
def ptxas():
    p = find_ptxas()
    if p is None:
        pytest.skip("no ptxas (pip install nvidia-cuda-nvcc)")
    return p


@pytest.fixture
def rng():
    return np.random.default_rng()
