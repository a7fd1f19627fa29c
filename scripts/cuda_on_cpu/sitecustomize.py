"""Runs a library's CUDA-only test suite on a machine without a GPU, in tiles' interpreter
(developers): with this directory on PYTHONPATH and CUDA_TO_CPU=1 (plus TILES_INTERPRET=1 and
TILES_AS_TRITON=1), torch's "cuda" devices become "cpu", `.cuda()` is the tensor itself, and
torch.cuda answers as an H100 would. Tests that need the CUDA runtime itself (graphs, streams,
events) still fail; everything else runs its kernels interpreted.

    CUDA_TO_CPU=1 TILES_INTERPRET=1 TILES_AS_TRITON=1 PYTHONPATH=scripts/cuda_on_cpu:<repo> pytest <tests>
"""

import os

if os.environ.get("CUDA_TO_CPU") == "1":
    import types

    import torch
    from torch.overrides import TorchFunctionMode

    def _cpu(d):
        if isinstance(d, str) and d.startswith("cuda"):
            return "cpu"
        if isinstance(d, torch.device) and d.type == "cuda":
            return torch.device("cpu")
        return d

    class _CudaIsCpu(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple(_cpu(a) for a in args)
            return func(*args, **kwargs)

    _CudaIsCpu().__enter__()
    _props = types.SimpleNamespace(major=9, minor=0, multi_processor_count=132, name="NVIDIA H100 80GB HBM3",
                                   total_memory=80 << 30)
    torch.cuda.is_available = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda *a: None
    torch.cuda.get_device_capability = lambda *a: (9, 0)
    torch.cuda.get_device_properties = lambda *a: _props
    torch.cuda.get_device_name = lambda *a: _props.name
    torch.cuda.device_count = lambda: 1
    torch.cuda.is_initialized = lambda: True

    class _Device:
        """`with torch.cuda.device(i):` and `torch.cuda.device_of(t)`: nothing to switch."""

        def __init__(self, *a):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    torch.cuda.device = _Device
    torch.cuda.device_of = _Device
    torch.cuda._DeviceGuard = _Device  # inductor's generated wrappers
    torch.cuda.set_device = lambda *a: None
    # What inductor's generated code calls, past the function mode.
    torch._C._dynamo.guards._empty_strided_cuda = \
        lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype)
    torch._C._cuda_getCurrentRawStream = lambda *a: 0
    torch.cuda.empty_cache = lambda: None

    class _Event:
        """A CUDA event on the host clock: benchmark fixtures time their interpreted runs."""

        def __init__(self, *a, **k):
            self.t = None

        def record(self, *a):
            import time

            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def query(self):
            return True

        def wait(self, *a):
            pass

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    class _Stream(_Device):
        """The one stream there is: work runs in order on the host (`with` switches nothing)."""

        cuda_stream = 0
        device = torch.device("cpu")

        def __init__(self, *a, **k):
            pass

        def synchronize(self):
            pass

        def wait_stream(self, *a):
            pass

        def wait_event(self, *a):
            pass

        def record_event(self, event=None):
            event = event or _Event()
            event.record()
            return event

        def query(self):
            return True

    torch.cuda.Event = _Event
    torch.cuda.Stream = _Stream
    torch.cuda.current_stream = torch.cuda.default_stream = lambda *a, **k: _Stream()
    torch.cuda.stream = lambda s=None: _Stream()
