"""The CUDA driver, through cuda-python (`cuda.bindings.driver`): context, PTX -> cubin,
module load and launch. Imported lazily: machines without a GPU never load it."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Tuple

from ..errors import LaunchError

_lock = threading.Lock()
_state: dict = {}


def _cu():
    try:
        from cuda.bindings import driver as cu  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as cu  # older cuda-python
        except ImportError as e:
            raise LaunchError("cuda-python is not installed: `pip install cuda-bindings` (or cuda-python)") from e
    return cu


def check(result: Any, what: str) -> Any:
    """Unpacks a cuda-python `(err, *values)` result, raising `LaunchError` on failure."""
    cu = _state["cu"]
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        _, name = cu.cuGetErrorName(err)
        _, desc = cu.cuGetErrorString(err)
        raise LaunchError(f"{what} failed: {name.decode() if name else err}: {desc.decode() if desc else ''}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def available() -> bool:
    """Whether a CUDA GPU can be used (never raises)."""
    try:
        init()
        return True
    except Exception:
        return False


def init() -> None:
    """Initialises the driver and makes device 0's primary context current (once per process;
    each new thread gets the context made current on first use)."""
    if "ctx" in _state:
        if not getattr(_tls, "bound", False):
            check(_state["cu"].cuCtxSetCurrent(_state["ctx"]), "cuCtxSetCurrent")
            _tls.bound = True
        return
    with _lock:
        if "ctx" not in _state:
            cu = _cu()
            _state["cu"] = cu
            check(cu.cuInit(0), "cuInit")
            n = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
            if n == 0:
                raise LaunchError("no CUDA GPU found")
            dev = check(cu.cuDeviceGet(0), "cuDeviceGet")
            ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            attr = cu.CUdevice_attribute
            major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attr")
            minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attr")
            smem = check(cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev), "attr")
            _state.update(dev=dev, capability=(major, minor), max_shared=smem, ctx=ctx)
    check(_state["cu"].cuCtxSetCurrent(_state["ctx"]), "cuCtxSetCurrent")
    _tls.bound = True


_tls = threading.local()


def capability() -> Tuple[int, int]:
    init()
    return _state["capability"]


def default_target() -> str:
    major, minor = capability()
    cc = major * 10 + minor
    return f"sm_{cc}a" if cc == 90 else f"sm_{cc}"


def link_ptx(ptx: str, name: str) -> bytes:
    """Assembles PTX into a cubin with the driver's JIT linker (no CUDA toolkit needed)."""
    init()
    cu = _state["cu"]
    state = check(cu.cuLinkCreate(0, [], []), "cuLinkCreate")
    try:
        data = ptx.encode() + b"\0"
        res = cu.cuLinkAddData(state, cu.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data), name.encode(), 0, [], [])
        if int(res[0]) != 0:
            _, err = cu.cuGetErrorName(res[0])
            raise LaunchError(f"the driver rejected the PTX of {name}: {err.decode() if err else res[0]}")
        cubin_ptr, size = check(cu.cuLinkComplete(state), "cuLinkComplete")
        return ctypes.string_at(int(cubin_ptr), int(size))
    finally:
        cu.cuLinkDestroy(state)


class LoadedKernel:
    """A kernel function in a loaded module, with its resource usage."""

    def __init__(self, cubin: bytes, name: str, shared: int):
        init()
        cu = _state["cu"]
        self._cubin = cubin  # the driver may read it lazily
        self.module = check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.function = check(cu.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
        fa = cu.CUfunction_attribute
        self.n_regs = check(cu.cuFuncGetAttribute(fa.CU_FUNC_ATTRIBUTE_NUM_REGS, self.function), "attr")
        self.n_spills = check(cu.cuFuncGetAttribute(fa.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, self.function), "attr")
        self.shared = shared
        if shared > 48 * 1024:
            if shared > _state["max_shared"]:
                from ..errors import OutOfResources

                raise OutOfResources(shared, _state["max_shared"], name)
            check(cu.cuFuncSetAttribute(self.function, fa.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                  "cuFuncSetAttribute")
        self.handle = int(self.function)
        self._launch = cu.cuLaunchKernel
        self._assert_ptr = None

    def read_assert_flag(self) -> int:
        """Synchronises, returns the line of a failed device_assert (0 if none) and clears it."""
        cu = _state["cu"]
        if self._assert_ptr is None:
            from .. import _tiles

            res = cu.cuModuleGetGlobal(self.module, _tiles.ASSERT_GLOBAL.encode())
            if int(res[0]) != 0:
                self._assert_ptr = 0
                return 0
            self._assert_ptr = res[1]
        if not self._assert_ptr:
            return 0
        check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        buf = ctypes.c_uint32(0)
        check(cu.cuMemcpyDtoH(ctypes.addressof(buf), self._assert_ptr, 4), "cuMemcpyDtoH")
        if buf.value:
            check(cu.cuMemsetD32(self._assert_ptr, 0, 1), "cuMemsetD32")
        return int(buf.value)

    def launch(self, grid: Tuple[int, int, int], threads: int, stream: int, params_addr: int) -> None:
        err = self._launch(self.function, grid[0], grid[1], grid[2], threads, 1, 1, self.shared, stream,
                           params_addr, 0)
        if int(err[0]) != 0:
            check(err, "cuLaunchKernel")


def launch_address() -> int:
    """The address of the driver's cuLaunchKernel, for the native launch path (0 if unknown)."""
    init()
    cu = _state["cu"]
    try:
        res = cu.cuGetProcAddress(b"cuLaunchKernel", 12000, 0)
        if int(res[0]) == 0 and int(res[1]):
            return int(res[1])
    except Exception:
        pass
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        return ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value or 0
    except OSError:
        return 0


def stream_function():
    """A fast `f(device) -> stream` for torch's current stream, or None (default stream)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream() -> int:
    """Torch's current stream when torch is in use, else the legacy default stream."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream
    return 0


def synchronize() -> None:
    init()
    check(_state["cu"].cuCtxSynchronize(), "cuCtxSynchronize")


# -- Triton's `triton.runtime.driver.active` ------------------------------------------------------

class GPUTarget(tuple):
    """(backend, arch, warp_size), as Triton's `GPUTarget`."""

    def __new__(cls, backend: str, arch: int, warp_size: int):
        return super().__new__(cls, (backend, arch, warp_size))

    backend = property(lambda self: self[0])
    arch = property(lambda self: self[1])
    warp_size = property(lambda self: self[2])

    def __repr__(self) -> str:
        return f"GPUTarget(backend={self.backend!r}, arch={self.arch}, warp_size={self.warp_size})"


# What tutorials read when no GPU is present (the interpreter behaves as an H100 would).
_NO_GPU_PROPERTIES = {"max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132,
                      "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120,
                      "max_threads_per_sm": 2048}


class _Utils:
    def get_device_properties(self, device: Any = None) -> dict:
        """The properties Triton reports: `multiprocessor_count`, `max_shared_mem`,
        `max_num_regs`, `warpSize`, clocks and bus width."""
        if not available():
            return dict(_NO_GPU_PROPERTIES)
        cu = _state["cu"]
        a = cu.CUdevice_attribute
        dev = _state["dev"]

        def get(attr):
            return check(cu.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute")

        return {"max_shared_mem": get(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                "max_num_regs": get(a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
                "multiprocessor_count": get(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                "warpSize": get(a.CU_DEVICE_ATTRIBUTE_WARP_SIZE),
                "sm_clock_rate": get(a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
                "mem_clock_rate": get(a.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
                "mem_bus_width": get(a.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
                "max_threads_per_sm": get(a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)}


class ActiveDriver:
    """`triton.runtime.driver.active`: the device, target, stream and properties."""

    utils = _Utils()

    def is_active(self) -> bool:
        return True

    def get_current_target(self) -> GPUTarget:
        if not available():
            return GPUTarget("cuda", 90, 32)
        major, minor = capability()
        return GPUTarget("cuda", major * 10 + minor, 32)

    def get_active_torch_device(self):
        try:
            import torch
        except ImportError:
            return "cuda" if available() else "cpu"
        if available() and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        if int(device) != 0:
            raise LaunchError("tiles runs on device 0 only")

    def get_current_stream(self, device: Any = None) -> int:
        return current_stream()

    def get_device_interface(self):
        import torch

        return torch.cuda

    def get_benchmarker(self):
        from ..testing import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self):
        import torch

        return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")

    def clear_cache(self, cache) -> None:
        cache.zero_()


active = ActiveDriver()
