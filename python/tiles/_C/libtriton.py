"""`triton._C.libtriton`'s objects that scripts (Triton's tutorials) use: `nvidia.cublas.CublasLt`
for cuBLAS comparisons, and `ir.context` for tools that build TTIR (`ASTSource.make_ir`). tiles'
own native module is `tiles._tiles`."""

from types import SimpleNamespace


def _cublas_lt(workspace):
    from ..runtime.cublas import CublasLt

    return CublasLt(workspace)


nvidia = SimpleNamespace(cublas=SimpleNamespace(CublasLt=_cublas_lt))


class _Context:
    """Triton's MLIR context: tiles has none; `ASTSource.make_ir` takes it and ignores it."""


ir = SimpleNamespace(context=_Context, load_dialects=lambda context: None)
