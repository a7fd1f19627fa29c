"""`triton.backends.compiler`: the target description `compile` takes, and Triton's backend
interface as code that inspects it reaches it (`make_backend(target).parse_options({})`, as
torch's inductor does to learn the default options)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

from ..runtime.driver import GPUTarget  # noqa: F401


@dataclasses.dataclass(frozen=True)
class CUDAOptions:
    """A compile's options with Triton's names and tiles' defaults: `compile(options=...)` takes
    exactly these keys. Those tiles has no use for are accepted and change nothing: the PTX
    version and ptxas options (the driver assembles), libdevice (tiles writes its math), the fp8
    and precision lists (fixed per target), the warp size (32), instrumentation, clusters."""

    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 3
    warp_size: int = 32
    maxnreg: Optional[int] = None
    enable_fp_fusion: bool = False
    enable_reflect_ftz: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ("fp8e4nv", "fp8e5")
    default_dot_input_precision: str = "tf32"
    allowed_dot_input_precisions: Tuple[str, ...] = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")  # semantic.dot's
    debug: bool = False
    sanitize_overflow: bool = True
    arch: Optional[str] = None
    backend_name: str = "cuda"
    ptx_version: Optional[int] = None
    ptx_options: Optional[str] = None
    extern_libs: Optional[Tuple[Tuple[str, str], ...]] = None
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    max_num_imprecise_acc_default: Optional[int] = None
    instrumentation_mode: str = ""
    cluster_dims: Tuple[int, int, int] = (1, 1, 1)


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(CUDAOptions))


class BaseBackend:
    """Triton's backend interface, for one target."""

    def __init__(self, target: Any):
        self.target = target

    @staticmethod
    def supports_target(target: Any) -> bool:
        return target[0] == "cuda"

    def parse_options(self, options: Dict[str, Any]) -> CUDAOptions:
        """The options a compile with `options` uses (unknown keys ignored, as in Triton)."""
        from ..runtime.jit import fp_fusion

        given = {k: v for k, v in options.items() if k in OPTION_NAMES and v is not None}
        given.setdefault("enable_fp_fusion", fp_fusion(None))
        given.setdefault("arch", f"sm{self.target[1]}")
        return CUDAOptions(**given)

    # What tools that build TTIR through Triton's backend call (torch's inductor does, to
    # analyse user kernels): tiles has no dialects to load nor codegen hooks to give.
    def load_dialects(self, context: Any) -> None:
        pass

    def get_codegen_implementation(self, options: Any = None) -> Dict[str, Any]:
        return {}

    def get_module_map(self) -> Dict[str, Any]:
        return {}

    @staticmethod
    def get_arg_specialization(arg: Any, ty: str, **kwargs: Any) -> Optional[str]:
        return None

    @staticmethod
    def parse_attr(desc: Any) -> list:
        """An argument's specialisation ("D": divisible by 16) as ASTSource attributes."""
        return [["tt.divisibility", 16]] if isinstance(desc, str) and "D" in desc else []

    def hash(self) -> str:
        """What identifies this backend's code generation in cache keys (Triton's
        `backend.hash()`; torch's inductor adds it to its own): tiles' build and the target."""
        from ..runtime.cache import triton_key

        return f"{triton_key()}-{self.target[0]}-{self.target[1]}"


CUDABackend = BaseBackend


def make_backend(target: Any) -> BaseBackend:
    """The backend that compiles for `target` (`GPUTarget("cuda", 90, 32)`)."""
    if not BaseBackend.supports_target(target):
        raise RuntimeError(f"tiles compiles for CUDA targets only, not {target!r}")
    return BaseBackend(target)
