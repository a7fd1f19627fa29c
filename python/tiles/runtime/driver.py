"""The CUDA driver: context, PTX -> cubin, module load and launch, through the native module's
`cuda_*` functions (libcuda.so.1 loaded at run time; neither the CUDA toolkit nor cuda-python is
needed, and a first launch from a warm cache imports nothing heavy)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Optional, Tuple

from ..errors import LaunchError

_lock = threading.Lock()
_state: dict = {}  # "count": devices, "error": why the driver cannot be used, "warm": the JIT's warm-up
_devices: dict = {}  # device ordinal -> {"ctx": its primary context, "capability", "max_shared"}
_tls = threading.local()  # "bound": a context is current; "device": set_current_device's


_NATIVE: list = []  # the native module, once imported (a launch asks for it)


def _native():
    if not _NATIVE:
        from .. import _tiles

        _NATIVE.append(_tiles)
    return _NATIVE[0]


def _call(fn, *args):
    try:
        return fn(*args)
    except RuntimeError as e:
        raise LaunchError(str(e)) from None


def available() -> bool:
    """Whether a CUDA GPU can be used (never raises)."""
    try:
        init()
        return True
    except Exception:
        return False


def _start() -> int:
    """Loads and initialises the driver, once; the number of devices."""
    n = _state.get("count")
    if n is None:
        with _lock:
            if "error" in _state:
                raise LaunchError(_state["error"])
            if "count" not in _state:
                try:
                    _state["count"] = _call(_native().cuda_device_count)
                except LaunchError as e:
                    _state["error"] = str(e)
                    raise
            n = _state["count"]
    return n


def _attribute(name: str, device: int) -> int:
    """A device's `CUDA_DEVICE_ATTRIBUTES[name]` (the native call refuses a device that is
    not there, naming how many there are); makes no context."""
    t = _native()
    return _call(t.cuda_device_attribute, t.CUDA_DEVICE_ATTRIBUTES[name], device)


def _capability(device: int) -> Tuple[int, int]:
    return _attribute("cc_major", device), _attribute("cc_minor", device)


def _device(device: int) -> dict:
    """Device `device`'s primary context (retained once) and the properties tiles reads."""
    d = _devices.get(device)
    if d is None:
        _start()
        with _lock:
            d = _devices.get(device)
            if d is None:
                capability, smem = _capability(device), _attribute("max_shared_mem", device)
                ctx = _call(_native().cuda_primary_context, device)
                d = _devices[device] = {"ctx": ctx, "capability": capability, "max_shared": smem}
    return d


def init() -> None:
    """Makes sure a CUDA context is current on this thread: the one already there (torch's,
    after `torch.cuda.set_device(d)` or inside `with torch.cuda.device(d):`), else the primary
    context of the thread's device (`set_current_device`; device 0 by default). Kernels load
    and launch on the current context's device, as Triton's launch on torch's current device;
    a process that uses only device 3 never makes a context on device 0."""
    if getattr(_tls, "bound", False):
        return
    _start()
    t = _native()
    if not _call(t.cuda_current_context):
        _call(t.cuda_set_current, _device(getattr(_tls, "device", 0))["ctx"])
    _tls.bound = True


def device_accessible(addr: int) -> bool:
    """Whether the GPU can reach `addr`: device, managed or pinned host memory (False for
    plain host memory, which a kernel would fault on)."""
    init()
    return _call(_native().cuda_device_accessible, addr)


def current_context() -> int:
    """The context kernels load into and launch on from this thread (see `init`)."""
    if not getattr(_tls, "bound", False):
        init()
    return _native().cuda_current_context()


def use_context(ctx: int) -> None:
    """Makes `ctx` (a `current_context()` of another thread) current on this thread: a
    compile pool's thread loads a kernel into the context of the thread that asked for it."""
    _start()
    if _call(_native().cuda_current_context) != ctx:
        _call(_native().cuda_set_current, ctx)
    _tls.bound = True


def current_device() -> int:
    """The device of this thread's current context (see `init`)."""
    init()
    d = _call(_native().cuda_current_device)
    return d if d >= 0 else getattr(_tls, "device", 0)


def set_current_device(device: int) -> None:
    """Makes `device` this thread's device: its primary context current, and torch's current
    device too where torch uses CUDA (so that the two agree)."""
    device = int(device)
    d = _device(device)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.set_device(device)
    _call(_native().cuda_set_current, d["ctx"])
    _tls.device = device
    _tls.bound = True


def targets_differ() -> bool:
    """Whether this machine's GPUs differ in compute capability (then a kernel compiles for
    each device's own; read once, without making contexts)."""
    v = _state.get("mixed")
    if v is None:
        try:
            v = len({_capability(d) for d in range(_start())}) > 1
        except LaunchError:
            v = False
        _state["mixed"] = v
    return v


def device_count() -> int:
    """The number of CUDA devices (0 without a driver or a GPU)."""
    try:
        return _start()
    except LaunchError:
        return 0


def capability(device: Optional[int] = None) -> Tuple[int, int]:
    return _device(current_device() if device is None else int(device))["capability"]


def max_shared(device: Optional[int] = None) -> int:
    """The shared memory one program may use (bytes, with the opt-in)."""
    return max(_device(current_device() if device is None else int(device))["max_shared"], 48 * 1024)


def shared_limit() -> int:
    """The shared memory one program may use: this GPU's (`max_shared`), or an H100's where
    there is no GPU (what tiles compiles for then)."""
    return max_shared() if available() else int(NO_GPU_PROPERTIES["max_shared_mem"])


def default_target() -> str:
    major, minor = capability()
    return capability_target(major * 10 + minor)


def capability_target(cc: int) -> str:
    """The target tiles compiles for on a GPU of compute capability `cc`: Hopper's `sm_90a`;
    GPUs newer than Hopper run sm_90 PTX (tiles emits PTX ISA 8.0, and the driver compiles
    PTX for newer GPUs)."""
    if cc == 90:
        return "sm_90a"
    return "sm_90" if cc > 90 else f"sm_{cc}"


# A kernel of nothing: what the JIT assembles to start itself.
_EMPTY_PTX = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry tiles_jit_warmup()\n{\n\tret;\n}\n"


def warm_jit() -> None:
    """Starts the driver's PTX JIT on a thread of its own, once per process, for a compile
    about to need it: a process's first assembly pays 5-15 ms for the JIT's start (an H100,
    measured against the second), which then overlaps the frontend and LLVM. Only where the
    driver is already in use (a launch, a warmup): a process that only compiles, such as
    torch's compile workers, never starts CUDA for it. Not a daemon thread: the interpreter
    joins it at exit rather than leave it inside the driver. `TILES_JIT_WARMUP=0` turns it off."""
    if "warm" in _state or "count" not in _state or not _jit_assembles():
        return
    if os.environ.get("TILES_JIT_WARMUP", "1") == "0":
        _state["warm"] = None
        return
    with _lock:
        if "warm" in _state:
            return
        try:
            ctx = current_context()
        except LaunchError:
            return
        t = _state["warm"] = threading.Thread(target=_warm, args=(ctx,), name="tiles-jit-warmup")
    t.start()


def _warm(ctx: int) -> None:
    try:
        use_context(ctx)  # the caller's device: no context made on another
        if loads_ptx():
            _call(_native().cuda_warm_jit, _EMPTY_PTX, "tiles_jit_warmup")
        else:
            link_ptx(_EMPTY_PTX, "tiles_jit_warmup")
    except Exception:  # noqa: BLE001 -- the kernel's own assembly reports any driver error
        pass


def link_ptx(ptx: str, name: str) -> bytes:
    """Assembles PTX into a cubin with the driver's JIT linker (no CUDA toolkit needed)."""
    init()
    return _call(_native().cuda_link_ptx, ptx, name)


def assembler() -> str:
    """What turns PTX into machine code:
    - "driver" (the default): the driver's JIT linker makes a cubin, which the disk cache
      keeps. No toolkit is needed, and compiles on threads assemble in parallel.
    - "load" (`TILES_ASSEMBLER=load`): the driver's JIT compiles the PTX as a whole program
      while it loads the module, as ptxas does; the linker compiles it as relocatable code.
      On the 580 drivers (stop 31, H200) the whole-program build took fewer registers for
      46 of 167 test kernels (Liger's SwiGLU 48 against 132, fused layernorm 32 against 56:
      +6.5 % bandwidth) but ran flash attention 4-6 % slower, and the driver compiles one
      module load at a time, so warmups on 8 threads gained 1.0-1.5x instead of 6x. No cubin
      comes out: the disk cache keeps the PTX and a later process compiles it again, unless
      the driver's own cache (`~/.nv/ComputeCache`) has it.
    - "ptxas" (`TILES_ASSEMBLER=ptxas`): the ptxas `knobs.nvidia.ptxas` finds, as Triton
      assembles (a whole-program build); no GPU needed."""
    v = os.environ.get("TILES_ASSEMBLER", "").strip().lower()
    if v in ("", "driver"):
        return "driver"
    if v in ("load", "ptxas"):
        return v
    raise ValueError(f"TILES_ASSEMBLER={v!r}: expected 'driver', 'load' or 'ptxas'")


def _jit_assembles() -> bool:
    """Whether the driver's JIT assembles (a bad `TILES_ASSEMBLER` is reported by the assembly)."""
    try:
        return assembler() != "ptxas"
    except ValueError:
        return False


def loads_ptx() -> bool:
    """Whether kernels load from their PTX (the "load" assembler) rather than from a cubin."""
    return assembler() == "load"


def assemble(ptx: str, name: str, target: str) -> bytes:
    """The cubin of `ptx` for `target` (`sm_90a`), from the `assembler()` in use; the driver's
    JIT linker for "load" as for "driver" (the whole-program JIT that loads kernels gives no
    cubin). ptxas needs no GPU; it runs as a process of its own, so the GIL is free meanwhile."""
    if assembler() != "ptxas":
        try:
            init()
        except LaunchError as e:
            raise LaunchError(f"{e}: no driver to assemble {name}'s PTX (TILES_ASSEMBLER=ptxas assembles "
                              "without one)") from e
        return link_ptx(ptx, name)
    import subprocess
    import tempfile

    from .. import knobs

    tool = knobs.nvidia.ptxas.path
    if not tool:
        raise RuntimeError("TILES_ASSEMBLER=ptxas, but no ptxas was found: set TRITON_PTXAS_PATH, install "
                           "nvidia-cuda-nvcc, or put ptxas on PATH")
    with tempfile.TemporaryDirectory(prefix="tiles-ptxas-") as d:
        src, out = os.path.join(d, f"{name}.ptx"), os.path.join(d, f"{name}.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([tool, f"-arch={target}", "-o", out, src], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ptxas ({tool}) failed on {name} for {target}:\n{(r.stderr or r.stdout).strip()}")
        with open(out, "rb") as f:
            return f.read()


class LoadedKernel:
    """A kernel function in a loaded module, with its resource usage: loaded from a cubin, or
    without one from `ptx`, which the driver's JIT then compiles as it loads."""

    def __init__(self, cubin: Optional[bytes], name: str, shared: int, ptx: Optional[str] = None):
        limit = _device(current_device())["max_shared"]
        if shared > 48 * 1024 and shared > limit:
            from ..errors import OutOfResources

            raise OutOfResources(shared, limit, "shared memory", name)
        self._cubin = cubin
        self.context = current_context()
        image = cubin if cubin is not None else ptx.encode()
        self.module, self.function, self.n_regs, self.n_spills = _call(_native().cuda_load, image, name, shared,
                                                                       cubin is None)
        self.shared = shared
        self.handle = int(self.function)
        self._assert_addr = None
        # CompiledKernel.run's native launcher (made on its first call; False: none suits).
        self.native_launch: Any = None
        # CompiledKernel.run itself, native, made with native_launch (None: `run` is Python).
        self.fast_run: Any = None

    def read_assert_flag(self) -> int:
        """Synchronises, returns the line of a failed device_assert (0 if none) and clears it."""
        t = _native()
        if self._assert_addr is None:
            self._assert_addr = _call(t.cuda_global_address, self.module, t.ASSERT_GLOBAL)
        if not self._assert_addr:
            return 0
        return int(_call(t.cuda_read_and_clear_u32, self._assert_addr))

    def launch(self, grid: Tuple[int, int, int], threads: int, stream: int, params_addr: int,
               flags: int = 0) -> None:
        """`flags`: LAUNCH_COOPERATIVE and/or LAUNCH_PDL (cuLaunchKernelEx attributes)."""
        _call(_native().cuda_launch, self.function, grid[0], grid[1], grid[2], threads, self.shared, int(stream or 0),
              params_addr, flags)


LAUNCH_COOPERATIVE = 1  # a cooperative grid: every program resident at once (`launch_cooperative_grid`)
LAUNCH_PDL = 2  # programmatic dependent launch (`launch_pdl`; pairs with tl.extra.cuda.gdc_*)


def launch_address() -> int:
    """The address of the driver's cuLaunchKernel, for the native launch path (0 if unknown)."""
    init()
    try:
        return int(_native().cuda_launch_address())
    except RuntimeError:
        return 0


def stream_function():
    """A fast `f(device) -> stream` for torch's current stream, or None (default stream)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(device: Any = None) -> int:
    """Torch's current stream (of `device`, else of the current device) when torch is in use,
    else the legacy default stream."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        if device is None:
            # torch's C calls: `torch.cuda.current_stream()` costs microseconds per launch.
            raw, dev = getattr(torch._C, "_cuda_getCurrentRawStream", None), getattr(torch._C, "_cuda_getDevice", None)
            if raw is not None and dev is not None:
                return raw(dev())
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def synchronize() -> None:
    init()
    _call(_native().cuda_synchronize)


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
NO_GPU_PROPERTIES = {"max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132,
                      "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120,
                      "max_threads_per_sm": 2048}


class _Utils:
    def get_device_properties(self, device: Any = None) -> dict:
        """The properties Triton reports: `multiprocessor_count`, `max_shared_mem`,
        `max_num_regs`, `warpSize`, clocks and bus width, of `device` (an index or a torch
        device; the current device by default)."""
        if not available():
            return dict(NO_GPU_PROPERTIES)
        dev = _device_index(device)
        keys = ("max_shared_mem", "max_num_regs", "multiprocessor_count", "warpSize", "sm_clock_rate",
                "mem_clock_rate", "mem_bus_width", "max_threads_per_sm")
        return {k: _attribute(k, dev) for k in keys}


def _device_index(device: Any) -> int:
    """A device given as an index, a torch device or `"cuda:1"`; None: the current one."""
    if device is None:
        return current_device()
    index = getattr(device, "index", device)
    if index is None:  # torch.device("cuda")
        return current_device()
    if isinstance(index, str):
        index = index.rpartition(":")[2] if ":" in index else None
        return current_device() if index is None else int(index)
    return int(index)


class ActiveDriver:
    """`triton.runtime.driver.active`: the device, target, stream and properties."""

    utils = _Utils()

    @staticmethod
    def is_active() -> bool:
        """Whether this driver can run kernels here (Triton asks it of the driver class):
        tiles' one driver always can (without a GPU, kernels run in the interpreter)."""
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
        """The device kernels launch on: torch's current device where torch set it (the
        current context's), else `set_current_device`'s, else 0."""
        return current_device() if available() else 0

    def set_current_device(self, device: int) -> None:
        set_current_device(device)

    def get_current_stream(self, device: Any = None) -> int:
        return current_stream(device)

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
default = active


def set_active(driver: Any) -> None:
    """Makes `driver` the one `active` names (Triton's `driver.set_active`; torch's inductor
    sets the GPU driver it found in `triton.backends.backends`)."""
    global active
    active = driver


def reset_active() -> None:
    """Makes the default driver active again (Triton's `driver.reset_active`)."""
    global active
    active = default


# `from triton.runtime.driver import driver`: Triton's driver configuration object (`.active`,
# `.set_active`, `.reset_active`, `.default`) is this module itself.
driver = sys.modules[__name__]
