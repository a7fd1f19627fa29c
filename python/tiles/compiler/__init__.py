"""`tiles.compile`: Python source -> IR -> passes -> LLVM -> PTX, without a GPU; and the
`CompiledKernel` that holds every stage and, once loaded, the GPU function."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import _tiles, knobs
from ..errors import CompilationError
from ..runtime import driver
from ..runtime.jit import grid_dims


def _asserts_by_line(asserts) -> Dict[int, str]:
    """The assert messages by source line (the flag a failed assert sets holds its line); the
    messages of several asserts on one line (`a * b + c` in debug mode) are joined."""
    out: Dict[int, str] = {}
    for line, msg in asserts:
        prev = out.get(line)
        out[line] = msg if prev is None or msg in prev.split(" | ") else f"{prev} | {msg}"
    return out


class CompiledKernel:
    """One kernel compiled for one signature, specialisation and target.

    `asm` holds each stage's text: `tir` (IR from the frontend), `tir_opt` (after the
    passes), `llir` (LLVM IR), `ptx`, and `cubin` (bytes, assembled when first read; see `link`).
    """

    def __init__(self, name: str, out: Dict[str, Any], target: str, num_warps: int, num_stages: int,
                 signature: Dict[str, str], constexprs: Dict[str, Any], file: str = "<unknown>",
                 arg_names: Sequence[str] = (), fp_fusion: bool = False, maxnreg: Optional[int] = None,
                 ftz: bool = True):
        self.name = out["name"]
        self.function_name = name
        tir = out["tir"]
        self.asm: Dict[str, Any] = _Stages(
            {"tir": tir, "tir_opt": out["tir_opt"], "llir": out.get("llir") or _Pending, "ptx": out["ptx"]},
            _LlirSource(tir, target, fp_fusion, maxnreg, ftz), self.link)
        # Triton's metadata fields that code reading `metadata` expects (torch's inductor reads
        # num_ctas, cluster_dims and the launch attributes), and tiles' own.
        self.metadata = SimpleNamespace(name=self.name, target=target, num_warps=num_warps, num_stages=num_stages,
                                        shared=out["shared"], num_threads=out["num_threads"],
                                        asserts=_asserts_by_line(out.get("asserts", [])), num_ctas=1,
                                        cluster_dims=(1, 1, 1), launch_pdl=False, launch_cooperative_grid=False)
        # Triton's `CompiledKernel.src`: what was compiled (an ASTSource; `src.fn` is the kernel).
        self.src: Any = None
        self.file = file
        self.signature = signature
        self.constexprs = constexprs
        self.params = [n for n, t in signature.items() if n not in constexprs and t != "constexpr"]
        self.arg_names = list(arg_names)  # every parameter, constexprs included (`kernel[grid](*args)`)
        self._loaded = None  # the module last loaded or used (`_loads` holds each context's)
        self._loads: Dict[int, Any] = {}
        self.cache_key: Optional[str] = None

    @property
    def shared(self) -> int:
        return self.metadata.shared

    @property
    def hash(self) -> str:
        """The compile's key (Triton's `CompiledKernel.hash`): equal for the same kernel,
        specialisation, options and target."""
        if self.cache_key is not None:
            return self.cache_key
        import hashlib

        return hashlib.sha256(f"{self.name}\n{self.asm['ptx']}".encode()).hexdigest()

    def link(self) -> bytes:
        """The PTX assembled into a cubin for this process's GPU, once: by the driver's JIT
        linker (without the GIL; no toolkit needed) or by ptxas (`TILES_ASSEMBLER=ptxas`, no
        GPU needed). Where kernels load from their PTX (`TILES_ASSEMBLER=load`, see
        `driver.assembler`) this cubin is only for reading: the loaded kernel is the JIT's
        whole-program build, which can differ in registers. Otherwise the disk cache keeps it,
        and launches and warmups call this on the thread that compiled the kernel, so kernels
        warmed up on a pool assemble in parallel."""
        cubin = self.asm.get("cubin")
        if cubin is None:
            from ..runtime import cache

            t0 = time.perf_counter()
            cubin = driver.assemble(self.asm["ptx"], self.name, self.metadata.target)
            self.asm["cubin"] = cubin
            if self.cache_key is not None and not driver.loads_ptx():
                cache.store_cubin(self.cache_key, cubin)
            if _timing():
                print(f"tiles: {self.name}: ptx->cubin {(time.perf_counter() - t0) * 1e3:.2f} ms", file=sys.stderr)
        return cubin

    def load(self):
        """Loads the module, once per CUDA context (a device's, see `driver.init`), and
        returns the loaded kernel of the current one: from the cubin `link` makes (once for
        every device), or from the PTX, which the driver's JIT compiles as it loads
        (`TILES_ASSEMBLER=load`)."""
        threads = self.metadata.num_warps * 32
        if threads > 1024:  # as Triton reports it, before the driver is asked
            from ..errors import OutOfResources

            raise OutOfResources(threads, 1024, "threads", self.name)
        ctx = driver.current_context()
        loaded = self._loads.get(ctx)
        if loaded is None:
            from_ptx = driver.loads_ptx()
            cubin = None if from_ptx else self.link()
            t0 = time.perf_counter()
            # The load hooks (HookChains): Triton's (module, function, name, metadata_group, hash).
            knobs.runtime.kernel_load_start_hook(None, None, self.name, {}, self.cache_key)
            loaded = driver.LoadedKernel(cubin, self.name, self.metadata.shared, ptx=self.asm["ptx"])
            knobs.runtime.kernel_load_end_hook(loaded.module, loaded.function, self.name, {}, self.cache_key)
            loaded = self._loads.setdefault(ctx, loaded)
            if _timing():
                what = "ptx->module (the driver's JIT) " if from_ptx else "load "
                print(f"tiles: {self.name}: {what}{(time.perf_counter() - t0) * 1e3:.2f} ms", file=sys.stderr)
        self._loaded = loaded
        return loaded

    def check_asserts(self) -> None:
        """After a launch with debugging on: raises DeviceAssertionError if a device_assert failed."""
        if not self.metadata.asserts or not self._loads:
            return
        loaded = self._loads.get(driver.current_context())
        if loaded is None:
            return
        line = loaded.read_assert_flag()
        if line:
            from ..errors import DeviceAssertionError

            msg = self.metadata.asserts.get(line, "")
            raise DeviceAssertionError(f"device-side assert triggered: device_assert failed in {self.function_name} "
                                       f"at {self.file}:{line}: {msg}")

    def _init_handles(self) -> None:
        """Loads the kernel on the GPU (Triton's name for it)."""
        self.load()

    @property
    def function(self) -> int:
        return self.load().handle

    @property
    def run(self) -> Callable[..., None]:
        """Triton's launcher call, as Triton's own `CompiledKernel[grid]` and torch's inductor
        make it: `run(grid_0, grid_1, grid_2, stream, function, packed_metadata,
        launch_metadata, launch_enter_hook, launch_exit_hook, *args)`, `args` being every
        parameter in order (the values given for constexprs are ignored). A property, as in
        Triton, so that code copying a kernel's `__dict__` with `run: None` (torch does, to
        pickle it) does not hide it. Once a launch went native, this is the loaded kernel's
        native `run` (`_tiles.RunLauncher`), which hands hooks, another context and arguments
        it cannot read to `_run`."""
        loaded = self._loaded
        if loaded is not None:
            fast = loaded.fast_run
            if fast is not None:
                return fast
        return self._run

    def _run(self, grid_0: int, grid_1: int, grid_2: int, stream: Any, function: Any, metadata: Any,
             launch_metadata: Any, launch_enter_hook: Any, launch_exit_hook: Any, *args: Any) -> None:
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        if not self._launch_natively(grid_0, grid_1, grid_2, stream, args):
            self._launch(grid_dims((grid_0, grid_1, grid_2)), args, stream, native=False)
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)

    def _launch_natively(self, grid_0: int, grid_1: int, grid_2: int, stream: Any, args: Sequence[Any]) -> bool:
        """Launches through the native launcher; False (nothing launched) where it does not
        apply: a parameter kind it lacks, or an argument it cannot read (a pointer given as a
        `__cuda_array_interface__` or DLPack object rather than a tensor with `data_ptr`)."""
        # The module of this thread's context: the one last used, most often.
        loaded = self._loaded
        if loaded is None or self._loads.get(driver.current_context()) is not loaded:
            loaded = self.load()
        native = loaded.native_launch
        if native is None:
            native = loaded.native_launch = self._native_launcher(loaded)
            if native:
                loaded.fast_run = _tiles.RunLauncher(native, loaded.context, self._run)
        if not native:
            return False
        try:
            native(grid_0, grid_1, grid_2, stream, *args)
        except TypeError:  # raised while reading the arguments, before any launch
            return False
        return True

    def _native_launcher(self, loaded: Any) -> Any:
        """The native launch of `run`'s arguments for this loaded kernel, or False where a
        parameter's kind (descriptors, fp64 and 16-bit scalars) or a launch attribute needs
        the Python path."""
        from ..runtime.jit import _SLOT_KINDS

        md = self.metadata
        if self._launch_flags():
            return False
        names = self.arg_names or self.params
        slots = []
        for n in self.params:
            ty = self.signature[n]
            kind = "ptr" if ty.startswith("*") else _SLOT_KINDS.get(ty, "?")
            if kind == "?" or n not in names:
                return False
            slots.append((names.index(n), kind, n))
        address = driver.launch_address()
        if not address:
            return False
        return _tiles.KernelLauncher(address, loaded.handle, md.num_threads, loaded.shared, len(names), slots)

    def launch_metadata(self, grid: Any, stream: Any, *args: Any) -> Optional["LazyDict"]:
        """What launch hooks receive for a launch with `args` (every parameter, in order): None
        while no launch_enter_hook is set, as in Triton (then nothing reads it)."""
        enter = knobs.runtime.launch_enter_hook
        if enter is None or not getattr(enter, "calls", True):
            return None
        ret = LazyDict({"name": self.name, "function": self.function, "stream": stream})
        fn = getattr(self.src, "fn", None)
        if fn is not None and getattr(fn, "launch_metadata", None) is not None:
            ret.add(fn.launch_metadata, (grid, self.metadata, dict(zip(fn.arg_names, args))))
        return ret

    def __getitem__(self, grid):
        """`kernel[grid](*args)`: launches with every parameter of the kernel in order,
        constexprs included (their values must match the compiled ones; they are not passed),
        or with the runtime parameters alone, in order."""
        g = grid if callable(grid) else grid_dims(grid)  # a fixed grid is read once

        def runner(*args, stream: Optional[int] = None):
            self._launch(g, args, stream)

        return runner

    def _launch(self, grid, args, stream, native: bool = True) -> None:
        """`grid`: three ints, or a function of the meta-parameters giving a grid."""
        names = self.arg_names or self.params
        if len(args) != len(names):
            args = self._every_argument(args, names)
        g = grid_dims(grid(dict(zip(names, args)))) if callable(grid) else grid
        if stream is None:
            s = driver.current_stream()
        else:
            s = int(stream)
        if native and min(g) > 0 and self._launch_natively(g[0], g[1], g[2], s, args):
            return
        self._launch_by_ctypes(g, args, names, s)

    def _every_argument(self, args: Sequence[Any], names: Sequence[str]) -> tuple:
        """`args` given as the parameters not declared `tl.constexpr` (FlagGems' LibEntry
        launches a CompiledKernel so), or as those the compile kept (a None argument is a
        constant), completed with the constexprs' compiled values."""
        plans = self.__dict__.get("_arg_plans")
        if plans is None:
            plans = self._arg_plans = {}
        plan = plans.get(len(args))
        if plan is None:
            from ..errors import LaunchError

            fn = getattr(self.src, "fn", None)
            declared = [p.name for p in fn.params if not p.is_constexpr] if hasattr(fn, "params") else self.params
            given = declared if len(args) == len(declared) else self.params if len(args) == len(self.params) else None
            if given is None:
                alt = f" or its {len(declared)} runtime ones" if len(declared) != len(names) else ""
                raise LaunchError(f"{self.function_name} takes {len(names)} arguments ({', '.join(names)}){alt}, "
                                  f"got {len(args)}")
            # Per parameter: the position of its value in `args`, or -1 and its compiled value.
            at = {n: i for i, n in enumerate(given)}
            plan = plans[len(args)] = [(at.get(n, -1), self.constexprs.get(n)) for n in names]
        return tuple([args[i] if i >= 0 else v for i, v in plan])

    def _launch_by_ctypes(self, g: Tuple[int, int, int], args: Sequence[Any], names: Sequence[str], s: int) -> None:
        """The launch through ctypes, for what the native launcher does not take."""
        import ctypes

        from ..errors import LaunchError
        from ..runtime.jit import _CTYPES, _pointer_info

        vals = dict(zip(names, args))
        cargs = []
        for n in self.params:
            ty = self.signature[n]
            v = vals[n]
            if ty.startswith("tensordesc<"):
                from ..runtime.jit import _desc_packers

                cargs.extend(pack(v) for _, pack in _desc_packers(0, len(v.block_shape)))
                continue
            if ty.startswith("*"):
                info = _pointer_info(v, n)
                if info is None:
                    raise LaunchError(f"argument '{n}' must be a device tensor for {ty}, got {type(v).__name__}")
                cargs.append(ctypes.c_uint64(info[0]))
            else:
                cargs.append(_CTYPES[ty](v))
        if min(g) <= 0:
            return
        loaded = self.load()
        ptrs = (ctypes.c_void_p * max(1, len(cargs)))(*[ctypes.addressof(c) for c in cargs])
        loaded.launch(g, self.metadata.num_threads, s, ctypes.addressof(ptrs), self._launch_flags())

    def _launch_flags(self) -> int:
        """The launch attributes the compile asked for, as `LoadedKernel.launch` takes them."""
        md = self.metadata
        return ((driver.LAUNCH_PDL if md.launch_pdl else 0)
                | (driver.LAUNCH_COOPERATIVE if md.launch_cooperative_grid else 0))

    @property
    def n_regs(self) -> int:
        return self.load().n_regs

    @property
    def n_spills(self) -> int:
        return self.load().n_spills

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.name} {self.metadata.target} num_warps={self.metadata.num_warps}>"


class _Pending:
    """Marks `asm["llir"]` as not made yet (a class, so that it survives pickling as itself)."""


class _LlirSource:
    """Makes a kernel's LLVM IR again from its `tir` and options (what `asm["llir"]` reads on
    first use); plain data, so a CompiledKernel pickles (torch's inductor sends compiled kernels
    from its compile workers to the process that launches them)."""

    def __init__(self, tir: str, target: str, fp_fusion: bool, maxnreg: Optional[int], ftz: bool):
        self.args = (tir, target, fp_fusion, maxnreg, ftz)

    def __call__(self) -> str:
        tir, target, fp_fusion, maxnreg, ftz = self.args
        return _tiles.parse_ir(tir).compile(target, fp_fusion=fp_fusion, maxnreg=maxnreg, ftz=ftz)["llir"]


class _Stages(dict):
    """`CompiledKernel.asm`: each stage's text by name. `llir` is made when first read (from
    `tir`, with the kernel's options): printing the LLVM IR on every compile cost up to 9 ms (a
    128x128 matmul's accumulator structs print as ~0.6 MB), and few users ever read it."""

    def __init__(self, stages: Dict[str, Any], llir_source: Callable[[], str],
                 cubin_source: Optional[Callable[[], bytes]] = None):
        super().__init__(stages)
        self._llir_source = llir_source
        # `asm["cubin"]` read before a launch assembles it (`CompiledKernel.link`), as Triton's
        # compile has it ready; `get` and `in` do not.
        self._cubin_source = cubin_source

    def _ready(self) -> "_Stages":
        """Makes `llir` if it is still pending; every read of a value goes through here."""
        if dict.get(self, "llir") is _Pending:
            dict.__setitem__(self, "llir", self._llir_source())
        return self

    def __getitem__(self, key):
        if key == "cubin" and self._cubin_source is not None and not dict.__contains__(self, "cubin"):
            return self._cubin_source()
        return dict.__getitem__(self._ready() if key == "llir" else self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):  # not dict's own: dict(asm) and {**asm} then read through __getitem__
        return iter(list(dict.keys(self)))

    def values(self):
        return dict.values(self._ready())

    def items(self):
        return dict.items(self._ready())

    def copy(self):
        return dict(self)

    def __eq__(self, other):
        return dict.__eq__(self._ready(), other)

    __hash__ = None

    def __repr__(self) -> str:
        return dict.__repr__(self._ready())


class LazyDict:
    """Triton's `LazyDict`: a dict whose further entries come from functions run only when
    someone asks (`get()`), as the launch hooks' metadata does with a kernel's
    `launch_metadata`."""

    def __init__(self, data: Dict[str, Any]):
        self.data = data
        self.extras: List[Tuple[Callable[..., Any], Tuple[Any, ...]]] = []

    def add(self, func: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        self.extras.append((func, args))

    def get(self) -> Dict[str, Any]:
        while self.extras:
            func, args = self.extras.pop(0)
            self.data.update(func(*args))
        return self.data

    def __getitem__(self, key: str) -> Any:
        return self.get()[key]


def _timing() -> bool:
    return os.environ.get("TILES_TIMING", "") not in ("", "0")


def _backend_error(jitfn, e: Exception) -> CompilationError:
    msg = str(e)
    src = jitfn.source()
    m = re.search(r"line (\d+)", msg)
    if m:
        line = int(m.group(1))
        rel = line - src.first_line
        text = src.lines[rel] if 0 <= rel < len(src.lines) else None
        return CompilationError(msg, src.file, line, 0, text, src.name)
    return CompilationError(msg, src.file, src.first_line, 0, None, src.name)


def _dump(name: str, out: Dict[str, Any]) -> None:
    d = os.environ.get("TILES_DUMP_IR")
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    base = os.path.join(d, name)
    with open(base + ".tir", "w") as f:
        f.write(out["tir"])
    for i, (p, text) in enumerate(out.get("passes", [])):
        with open(f"{base}.{i:02d}.{p}.tir", "w") as f:
            f.write(text)
    with open(base + ".ll", "w") as f:
        f.write(out["llir"])
    with open(base + ".ptx", "w") as f:
        f.write(out["ptx"])


class ASTSource:
    """Triton's ahead-of-time source: a kernel with its signature (`{"x": "*fp32", "BLOCK":
    "constexpr"}`), constexpr values (by name or by `(index,)`) and attributes by `(index,)`
    (`[["tt.divisibility", 16]]`). `tiles.compile(ASTSource(...), target=GPUTarget(...),
    options={"num_warps": 8})` compiles it without a GPU, as `triton.compile` does."""

    def __init__(self, fn, signature: Dict[str, str], constexprs: Optional[Dict[Any, Any]] = None,
                 attrs: Optional[Dict[Any, Any]] = None):
        from ..runtime.jit import JITFunction

        self.fn = fn if isinstance(fn, JITFunction) else JITFunction(fn)
        self.name = self.fn.__name__
        names = self.fn.param_names
        for k in signature:
            if not isinstance(k, str):
                raise TypeError("signature keys must be parameter names (strings)")

        def name_of(k) -> str:
            if isinstance(k, str):
                return k
            if isinstance(k, tuple) and len(k) == 1 and isinstance(k[0], int) and 0 <= k[0] < len(names):
                return names[k[0]]
            raise TypeError(f"{self.name}: {k!r} names no parameter (a name or an (index,) tuple)")

        self.constants = {name_of(k): v for k, v in (constexprs or {}).items()}
        self.signature = {k: v for k, v in signature.items() if str(v) != "constexpr" and k not in self.constants}
        self.attrs = attrs or {}
        self.specialization: Dict[str, int] = {}
        for k, items in self.attrs.items():
            for item in items:
                if len(item) == 2 and item[0] == "tt.divisibility":
                    self.specialization[name_of(k)] = int(item[1])

    def make_ir(self, target: Any, options: Any, codegen_fns: Any, module_map: Any, context: Any):
        """Triton's `make_ir`: the kernel's IR right after the frontend, as a module in the
        shape of Triton's MLIR bindings with TTIR operation names (`tiles._ttir_view`), for tools
        that analyse it (torch's inductor finds the tensors a user kernel writes this way).
        Tuple and descriptor parameters are refused: their TTIR parameters are not one per
        argument."""
        from .. import frontend
        from .._ttir_view import view

        for name, ty in self.signature.items():
            if not isinstance(ty, str) or ty.startswith(("tensordesc", "(")):
                raise NotImplementedError(f"{self.name}: make_ir has no view of parameter '{name}' ({ty})")
        num_warps = int(getattr(options, "num_warps", 4) or 4)
        kernel = frontend.generate_ir(self.fn, dict(self.signature), dict(self.constants), num_warps,
                                      dict(self.specialization), target=_target_name(target))
        return view(kernel)


def _target_name(target: Any) -> str:
    """`GPUTarget("cuda", 90, 32)` (or an arch string) -> the target tiles compiles for."""
    if target is None:
        from ..runtime.driver import active

        target = active.get_current_target()
    if isinstance(target, str):
        return target
    backend, arch = target[0], int(target[1])
    if backend != "cuda":
        raise ValueError(f"tiles compiles for NVIDIA GPUs (backend 'cuda'), not {backend!r}")
    from ..runtime.driver import capability_target

    return capability_target(arch)


def compile(fn=None, signature: Optional[Dict[str, str]] = None, constexprs: Optional[Dict[str, Any]] = None,
            target: Any = "sm_90a", num_warps: int = 4, num_stages: int = 3,
            specialization: Optional[Dict[str, int]] = None, equal_to_1: Sequence[str] = (), debug: bool = False,
            enable_fp_fusion: Optional[bool] = None, maxnreg: Optional[int] = None,
            options: Optional[Dict[str, Any]] = None, src: Any = None) -> CompiledKernel:
    """Compiles `fn` (a @tiles.jit function) for `signature` without a GPU.

    Signature types are spelled as Triton spells them: `*fp16`, `i32`, `fp32`, and
    `constexpr` for parameters whose value is in `constexprs`. A type may carry a
    divisibility suffix (`"*fp32:16"`, `"i32:16"`) or be given through `specialization`.
    Triton's form works too: `compile(ASTSource(fn, signature, constexprs, attrs),
    target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})`, the source
    also by its keyword (`compile(src=ASTSource(...), target=...)`).
    """
    if fn is None:
        fn = src
    if fn is None:
        raise TypeError("compile() needs the kernel (or Triton's ASTSource) to compile")
    ready = _front(fn, signature, constexprs, target, num_warps, num_stages, specialization, equal_to_1, debug,
                   enable_fp_fusion, maxnreg, options)
    return ready if isinstance(ready, CompiledKernel) else ready.finish()


class _Backend:
    """A kernel whose IR the frontend has built: what is left of its compile (passes, LLVM,
    PTX: all without the GIL), then the cache entry and the CompiledKernel."""

    __slots__ = ("fn", "kernel", "key", "target", "num_warps", "num_stages", "sig", "constexprs", "fp_fusion",
                 "maxnreg", "ftz", "dump", "src", "launch_attrs", "frontend_s")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)

    def finish(self) -> CompiledKernel:
        from ..runtime import cache

        t1 = time.perf_counter()
        try:
            out = self.kernel.compile(self.target, all_stages=self.dump, fp_fusion=self.fp_fusion,
                                      maxnreg=self.maxnreg, llir=self.dump, ftz=self.ftz)
        except _tiles.BackendError as e:
            raise _backend_error(self.fn, e) from None
        t2 = time.perf_counter()
        if _timing():
            stages = ", ".join(f"{n} {t * 1e3:.2f}" for n, t in out["timings"])
            print(f"tiles: {out['name']}: frontend {self.frontend_s * 1e3:.2f} ms, {stages} ms "
                  f"(passes + LLVM + PTX {(t2 - t1) * 1e3:.2f} ms)", file=sys.stderr)
        _dump(out["name"], out)
        ck = CompiledKernel(self.fn.__name__, out, self.target, self.num_warps, self.num_stages, self.sig,
                            self.constexprs, self.fn.source().file, self.fn.param_names, self.fp_fusion,
                            self.maxnreg, self.ftz)
        _describe(ck, self.fn, self.src, self.sig, self.constexprs, self.launch_attrs)
        t3 = time.perf_counter()
        if not self.dump:
            cache.store(self.key, {"name": out["name"], "shared": out["shared"], "num_threads": out["num_threads"],
                                   "asserts": out["asserts"], "target": self.target},
                        {k: out[k] for k in ("tir", "tir_opt", "ptx")})
            ck.cache_key = self.key
        _notify_listener(ck, self.key, self.frontend_s, out["timings"], time.perf_counter() - t3, False)
        return ck


def _notify_listener(ck: CompiledKernel, key: str, frontend_s: float, stages: Sequence[Tuple[str, float]],
                     store_s: float, cache_hit: bool) -> None:
    """Calls `knobs.compilation.listener`, where one is set, as Triton does after a compile or
    a disk-cache hit (times in microseconds; a hit has no stages)."""
    listener = knobs.compilation.listener
    if listener is None:
        return
    md = dict(vars(ck.metadata))
    digits = "".join(c for c in str(md["target"]) if c.isdigit())
    md.update(hash=key, target=driver.GPUTarget("cuda", int(digits or 0), 32))
    times = knobs.CompileTimes(int(frontend_s * 1e6), [(n, int(t * 1e6)) for n, t in stages], int(store_s * 1e6))
    listener(src=ck.src, metadata=md, metadata_group={}, times=times, cache_hit=cache_hit)


def _front(fn, signature: Optional[Dict[str, str]] = None, constexprs: Optional[Dict[str, Any]] = None,
           target: Any = "sm_90a", num_warps: int = 4, num_stages: int = 3,
           specialization: Optional[Dict[str, int]] = None, equal_to_1: Sequence[str] = (), debug: bool = False,
           enable_fp_fusion: Optional[bool] = None, maxnreg: Optional[int] = None,
           options: Optional[Dict[str, Any]] = None, sanitize_overflow: bool = True,
           enable_reflect_ftz: bool = True, fp32_default: Optional[str] = None):
    """`compile` up to the end of the frontend (the part that needs the GIL): a CompiledKernel
    on a disk-cache hit, else the `_Backend` that finishes it."""
    from .. import frontend
    from ..runtime.jit import JITFunction

    src = None
    if isinstance(fn, ASTSource):
        src = fn
        fn, signature = src.fn, src.signature
        constexprs = dict(src.constants, **(constexprs or {}))
        specialization = dict(src.specialization, **(specialization or {}))
    launch_attrs = {}
    if options:
        from ..backends.compiler import OPTION_NAMES

        unknown = set(options) - OPTION_NAMES
        if unknown:
            raise TypeError(f"unknown compile option(s) {sorted(unknown)}; tiles takes Triton's {sorted(OPTION_NAMES)}")
        if int(options.get("num_ctas") or 1) != 1:
            raise ValueError("tiles compiles one CTA per program (num_ctas=1)")
        launch_attrs = {k: bool(options[k]) for k in ("launch_pdl", "launch_cooperative_grid") if options.get(k)}
        if options.get("default_dot_input_precision"):
            fp32_default = fp32_default or str(options["default_dot_input_precision"])
        num_warps = options.get("num_warps", num_warps)
        num_stages = options.get("num_stages", num_stages)
        debug = options.get("debug", debug)
        enable_fp_fusion = options.get("enable_fp_fusion", enable_fp_fusion)
        maxnreg = options.get("maxnreg", maxnreg)
        sanitize_overflow = options.get("sanitize_overflow", sanitize_overflow)
        enable_reflect_ftz = options.get("enable_reflect_ftz", enable_reflect_ftz)
        if options.get("arch"):  # Triton's option: the GPU to compile for
            from ..runtime.jit import arch_target

            target = arch_target(options["arch"])
    # None: the default (`knobs.language.default_fp_fusion`); off while force-disabled.
    from ..runtime.jit import env_setting, fp_fusion

    enable_fp_fusion = fp_fusion(enable_fp_fusion)
    # fp32 tl.dot's precision where a kernel names none: `knobs.language.fp32_default`.
    fp32_default = fp32_default or env_setting("F32_DEFAULT")
    # Integer overflow checks are part of debug mode (Triton's `sanitize_overflow` option).
    sanitize = bool(debug) and bool(sanitize_overflow)
    if signature is None:
        raise TypeError("compile() needs a signature (or an ASTSource)")
    target = _target_name(target)
    if not isinstance(fn, JITFunction):
        fn = JITFunction(fn)
    if num_warps <= 0 or num_warps & (num_warps - 1):
        from ..errors import BadOptionError

        raise BadOptionError(f"num_warps must be a power of 2, got {num_warps}")
    constexprs = dict(constexprs or {})
    spec = dict(specialization or {})
    sig: Dict[str, str] = {}
    for name, ty in signature.items():
        ty = str(ty)
        if ":" in ty:
            ty, div = ty.split(":", 1)
            spec[name] = int(div)
        sig[name] = ty
    for p in fn.params:
        if p.name not in sig and p.name not in constexprs:
            if p.is_constexpr and p.default is not p.empty:
                constexprs[p.name] = p.default
            else:
                raise TypeError(f"signature has no entry for parameter '{p.name}' of {fn.__name__}")
    unknown = set(sig) - set(fn.param_names)
    if unknown:
        raise TypeError(f"{fn.__name__} has no parameter(s) {sorted(unknown)}")
    from ..runtime import cache

    dump = bool(os.environ.get("TILES_DUMP_IR"))
    t_key = time.perf_counter()
    key = cache.kernel_key(fn, signature=sig, spec=spec, ones=sorted(equal_to_1), constexprs=constexprs,
                           target=target, num_warps=num_warps, num_stages=num_stages, debug=bool(debug),
                           fp_fusion=bool(enable_fp_fusion), maxnreg=maxnreg, sanitize_overflow=sanitize,
                           ftz=bool(enable_reflect_ftz), fp32_default=fp32_default)
    hit = None if dump or _always_compile() else cache.load(key)
    if hit is not None:
        out = dict(hit["stages"], name=hit["name"], shared=hit["shared"], num_threads=hit["num_threads"],
                   asserts=[tuple(a) for a in hit["asserts"]])
        ck = CompiledKernel(fn.__name__, out, target, num_warps, num_stages, sig, constexprs, fn.source().file,
                            fn.param_names, bool(enable_fp_fusion), maxnreg, bool(enable_reflect_ftz))
        if "cubin" in hit:
            ck.asm["cubin"] = hit["cubin"]
        ck.cache_key = key
        _describe(ck, fn, src, sig, constexprs, launch_attrs)
        if _timing():
            print(f"tiles: {ck.name}: disk cache hit", file=sys.stderr)
        _notify_listener(ck, key, time.perf_counter() - t_key, (), 0.0, True)
        return ck
    driver.warm_jit()  # a miss: the PTX will be assembled here, on a GPU
    t0 = time.perf_counter()
    kernel = frontend.generate_ir(fn, sig, constexprs, num_warps, spec, equal_to_1, debug, num_stages, target,
                                  sanitize, fp32_default)
    return _Backend(fn=fn, kernel=kernel, key=key, target=target, num_warps=num_warps, num_stages=num_stages,
                    sig=sig, constexprs=constexprs, fp_fusion=bool(enable_fp_fusion), maxnreg=maxnreg,
                    ftz=bool(enable_reflect_ftz), dump=dump, src=src, launch_attrs=launch_attrs,
                    frontend_s=time.perf_counter() - t0)


def _always_compile() -> bool:
    """Triton's `knobs.compilation.always_compile` (`TRITON_ALWAYS_COMPILE`, or tiles'
    `TILES_ALWAYS_COMPILE`): compile even where the disk cache holds the kernel."""
    from ..runtime.jit import env_flag

    return bool(knobs.compilation.always_compile) or env_flag("ALWAYS_COMPILE")


def _describe(ck: "CompiledKernel", fn, src: Optional["ASTSource"], sig: Dict[str, str], constexprs: Dict[str, Any],
              launch_attrs: Dict[str, bool]) -> None:
    """Fills in what Triton's CompiledKernel also tells: the source compiled (`src`, an
    ASTSource when compile() got one) and the launch attributes asked for."""
    ck.src = src if src is not None else ASTSource(fn, sig, constexprs)
    for k, v in launch_attrs.items():
        setattr(ck.metadata, k, v)


_POOLS: Dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()
_POOL_THREAD_PREFIX = "tiles-compile"


def _pool(workers: int):
    """The process's compile pool of `workers` threads, made on first use and kept: a thread
    new to the process first fills its own malloc arena, page by page (~450 page faults for a
    layernorm, 10 % of its compile on one thread, and page faults of many threads at once
    serialise in the kernel); a kept thread compiles in memory it already has."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=_POOL_THREAD_PREFIX)
        return pool


class _Task:
    """A backend that a pool thread or the thread waiting for it runs, whichever comes first."""

    __slots__ = ("backend", "claim", "done", "value", "error")

    def __init__(self, backend: _Backend):
        self.backend = backend
        self.claim = threading.Lock()
        self.done = threading.Event()
        self.value: Optional[CompiledKernel] = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        if not self.claim.acquire(blocking=False):
            return
        try:
            self.value = self.backend.finish()
        except BaseException as e:  # noqa: BLE001 -- raised by result(), in the jobs' order
            self.error = e
        finally:
            self.done.set()

    def result(self) -> CompiledKernel:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


def compile_many(jobs, max_workers: Optional[int] = None):
    """Compiles many kernels at once; returns the compiled kernels in the jobs' order.

    `jobs` is an iterable of dicts of `tiles.compile` keyword arguments (with `fn`). On
    `max_workers` threads (default: one per core): the calling thread runs the frontends,
    which need the GIL, one after another, and hands each kernel's passes, LLVM and PTX stages
    to a kept pool of `max_workers - 1` threads as soon as its IR is built; those stages run
    without the GIL. The calling thread then runs the backends no pool thread has started.
    Frontends one at a time, rather than the pool's threads taking turns at the GIL through
    them, start the first backend after one frontend instead of after all of them.
    The first failing job (in the jobs' order) raises, after the jobs before it are done.
    """
    jobs = list(jobs)
    workers = max_workers or os.cpu_count() or 1
    if workers <= 1 or threading.current_thread().name.startswith(_POOL_THREAD_PREFIX):
        # One thread, or called from one of the pool's jobs (waiting on the pool could
        # deadlock it): one after another.
        return [compile(**kw) for kw in jobs]
    # A pool thread back from the Rust stages needs the GIL, briefly, while this thread runs a
    # frontend; a short switch interval keeps its wait short.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 0.0002))
    try:
        pool = _pool(workers - 1)
        pending: list = []
        for kw in jobs:
            try:
                ready = _front(**kw)
            except BaseException as e:  # noqa: BLE001 -- raised after the jobs before it
                pending.append(e)
                break
            if not isinstance(ready, CompiledKernel):
                ready = _Task(ready)
                pool.submit(ready.run)
            pending.append(ready)
        for p in reversed(pending):  # the pool takes them from the front
            if isinstance(p, _Task):
                p.run()
        out = []
        for p in pending:
            if isinstance(p, BaseException):
                raise p
            out.append(p.result() if isinstance(p, _Task) else p)
        return out
    finally:
        sys.setswitchinterval(interval)


from . import errors  # noqa: E402,F401  (`triton.compiler.errors`, found as an attribute too)


def max_shared_mem(device: Any = None) -> int:
    """The shared memory one program may use on the GPU, in bytes (Triton's
    `triton.compiler.max_shared_mem`; an H100's without a GPU)."""
    return driver.shared_limit()


def __getattr__(name: str) -> Any:
    # `tiles.compiler.compiler` (Triton's module of these names), imported on first use.
    if name == "compiler":
        import importlib

        return importlib.import_module(".compiler", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
