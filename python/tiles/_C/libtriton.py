"""`triton._C.libtriton`'s objects that scripts (Triton's tutorials) use: `nvidia.cublas.CublasLt`
for cuBLAS comparisons. tiles' own native module is `tiles._tiles`."""

from types import SimpleNamespace


def _cublas_lt(workspace):
    from ..runtime.cublas import CublasLt

    return CublasLt(workspace)


nvidia = SimpleNamespace(cublas=SimpleNamespace(CublasLt=_cublas_lt))
