"""Several GPUs in one process: kernels launch on the current device (torch's, or
`driver.active.set_current_device`'s), load once per device, and a process that uses only
device 1 makes no context on device 0.

The CPU tests run the driver layer over a stand-in for the native CUDA functions (two devices,
contexts current per thread); the GPU tests run the same on a machine with two GPUs, and the
single-device parts on any GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tiles
import tiles.language as tl
from tiles.errors import LaunchError
from tiles.runtime import driver

SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}


@tiles.jit
def affine_kernel(x_ptr, y_ptr, n, A: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * A + 1.0, mask=m)


class FakeCuda:
    """The native `cuda_*` functions the driver layer calls, for `n` devices of `caps`: a
    primary context per device (handle 1000 + device), the current context per thread, and a
    record of what was retained, assembled and loaded where."""

    CUDA_DEVICE_ATTRIBUTES = {"cc_major": 75, "cc_minor": 76, "max_shared_mem": 97, "multiprocessor_count": 16,
                              "max_num_regs": 12, "warpSize": 10, "sm_clock_rate": 13, "mem_clock_rate": 36,
                              "mem_bus_width": 37, "max_threads_per_sm": 39}

    def __init__(self, caps=((9, 0), (9, 0))):
        self.caps = caps
        self.tls = threading.local()
        self.retained, self.loads, self.links = [], [], 0

    def cuda_device_count(self):
        return len(self.caps)

    def cuda_primary_context(self, device=0):
        self._check(device)
        self.retained.append(device)
        return 1000 + device

    def cuda_current_context(self):
        return getattr(self.tls, "ctx", 0)

    def cuda_current_device(self):
        ctx = self.cuda_current_context()
        return ctx - 1000 if ctx else -1

    def cuda_set_current(self, ctx):
        self.tls.ctx = ctx

    def _check(self, device):  # as the native module refuses a device that is not there
        n = len(self.caps)
        if not 0 <= device < n:
            raise RuntimeError(f"no CUDA device {device}: this machine has {n} (0 to {n - 1})")

    def cuda_device_attribute(self, which, device=0):
        self._check(device)
        a = self.CUDA_DEVICE_ATTRIBUTES
        if which == a["cc_major"]:
            return self.caps[device][0]
        if which == a["cc_minor"]:
            return self.caps[device][1]
        return 232448 if which == a["max_shared_mem"] else 1

    def cuda_link_ptx(self, ptx, name):
        self.links += 1
        return b"\x7fELF cubin of " + name.encode()

    def cuda_load(self, image, name, shared, ptx=False):
        ctx = self.cuda_current_context()
        assert ctx, "a module loads into a current context"
        self.loads.append((name, ctx))
        return (ctx * 10, ctx * 10 + 1, 32, 0)


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    fake = FakeCuda()
    monkeypatch.setattr(driver, "_native", lambda: fake)
    monkeypatch.setattr(driver, "_state", {"warm": None})  # no JIT warm-up thread
    monkeypatch.setattr(driver, "_devices", {})
    monkeypatch.setattr(driver, "_tls", threading.local())
    monkeypatch.setenv("TILES_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILES_ASSEMBLER", raising=False)
    return fake


def on_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_a_thread_keeps_the_context_it_has_else_takes_device_0s(fake_cuda):
    # As torch leaves it after `torch.cuda.set_device(1)`: device 1's context is current.
    def torch_on_device_1():
        fake_cuda.cuda_set_current(1001)
        return driver.current_device(), driver.active.get_current_device(), driver.current_context()

    assert on_thread(torch_on_device_1) == (1, 1, 1001)
    assert fake_cuda.retained == []  # no context made on device 0 (nor any other)
    # A thread with no context current takes device 0's primary context.
    assert on_thread(driver.current_device) == 0
    assert fake_cuda.retained == [0]
    assert driver.active.utils.get_device_properties(1)["max_shared_mem"] == 232448
    with pytest.raises(LaunchError, match="no CUDA device 2: this machine has 2"):
        driver.active.set_current_device(2)


def test_a_kernel_assembles_once_and_loads_once_per_device(fake_cuda):
    k = tiles.compile(affine_kernel, signature=SIG, constexprs={"A": 2.0, "BLOCK": 128})
    first = k.load()
    assert fake_cuda.loads == [("affine_kernel", 1000)] and k.load() is first
    driver.active.set_current_device(1)
    assert driver.active.get_current_device() == 1
    second = k.load()
    assert second is not first and second.context == 1001 and k.function == second.handle
    assert fake_cuda.loads == [("affine_kernel", 1000), ("affine_kernel", 1001)]
    assert fake_cuda.links == 1  # one cubin for both devices
    driver.active.set_current_device(0)
    assert k.load() is first and len(fake_cuda.loads) == 2


def test_compile_pool_threads_load_in_the_asking_devices_context(fake_cuda):
    from concurrent.futures import ThreadPoolExecutor

    driver.active.set_current_device(1)
    x = tiles.MockTensor(tl.float32, [1024])
    with ThreadPoolExecutor(2, thread_name_prefix="exec") as pool, tiles.AsyncCompileMode(pool):
        futs = [affine_kernel.warmup(x, x, 1000, A=a, BLOCK=256, grid=(4,)) for a in (3.0, 4.0)]
    assert all(f.result() is not None for f in futs)
    assert [ctx for _, ctx in fake_cuda.loads] == [1001, 1001]
    assert 0 not in fake_cuda.retained  # the pool's threads made no context on device 0


def test_gpus_of_two_kinds_compile_for_each(fake_cuda):
    fake_cuda.caps = ((9, 0), (8, 0))
    assert driver.targets_differ()
    assert driver.default_target() == "sm_90a"
    driver.active.set_current_device(1)
    assert driver.default_target() == "sm_80" and driver.active.get_current_target().arch == 80


# -- on GPUs ----------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_launches_follow_torch_current_device_on_one_gpu(rng):
    import torch

    x = torch.from_numpy(rng.standard_normal(3000).astype(np.float32)).cuda()
    y = torch.empty_like(x)
    with torch.cuda.device(0):
        affine_kernel[(3,)](x, y, 3000, A=2.5, BLOCK=1024)
    np.testing.assert_allclose(y.cpu().numpy(), x.cpu().numpy() * 2.5 + 1.0, rtol=1e-6)
    assert driver.active.get_current_device() == torch.cuda.current_device() == 0
    driver.active.set_current_device(0)
    with pytest.raises(LaunchError, match=r"no CUDA device \d+"):
        driver.active.set_current_device(torch.cuda.device_count())


_TWO_GPUS = r'''
import sys
import numpy as np
import torch
from cuda.bindings import driver as cu
import tiles
import tiles.language as tl
from tiles.runtime import driver

@tiles.jit
def affine_kernel(x_ptr, y_ptr, n, A: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * A + 1.0, mask=m)

@tiles.autotune(configs=[tiles.Config({"BLOCK": b}) for b in (128, 256, 512)], key=["n"])
@tiles.jit
def tuned_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) - 2.0, mask=m)

def check(dev, a):
    x = torch.randn(5000, device=f"cuda:{dev}")
    y = torch.full_like(x, float("nan"))
    affine_kernel[(5,)](x, y, 5000, A=a, BLOCK=1024)
    torch.testing.assert_close(y, x * a + 1.0)
    z = torch.full_like(x, float("nan"))
    tuned_kernel[lambda m: (triton_cdiv(5000, m["BLOCK"]),)](x, z, 5000)
    torch.testing.assert_close(z, x - 2.0)

def triton_cdiv(a, b):
    return (a + b - 1) // b

def active(dev):
    err, flags, on = cu.cuDevicePrimaryCtxGetState(dev)
    return bool(on)

mode = sys.argv[1]
if mode == "only1":
    torch.cuda.set_device(1)
    for _ in range(3):  # the Python path, then the native dispatcher's
        check(1, 3.0)
    tiles.testing.do_bench(lambda: affine_kernel[(5,)](torch.empty(5000, device="cuda"),
                                                       torch.empty(5000, device="cuda"), 5000, A=1.0, BLOCK=1024))
    torch.cuda.synchronize()
    print("device0_context", active(0), "device1_context", active(1), "current", driver.active.get_current_device())
else:
    for i in range(6):  # alternating: each device loads its own module, the dispatcher keys on it
        dev = i % 2
        with torch.cuda.device(dev):
            check(dev, 2.0)
    torch.cuda.synchronize(0); torch.cuda.synchronize(1)
    spec = next(iter(affine_kernel.cache.values()))
    print("loads", len(spec.compiled._loads), "compiles", len(affine_kernel.cache))
'''


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["only1", "alternate"])
def test_kernels_run_on_the_second_gpu(tmp_path, mode):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    script = tmp_path / "two_gpus.py"
    script.write_text(_TWO_GPUS)
    env = dict(os.environ, TILES_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.split()
    if mode == "only1":
        # Torch on device 1 alone makes no context on device 0; nor does tiles.
        assert out == ["device0_context", "False", "device1_context", "True", "current", "1"], r.stdout
    else:
        assert out == ["loads", "2", "compiles", "1"], r.stdout
