"""The on-disk kernel cache (`TILES_CACHE_DIR`, default `~/.cache/tiles`).

Key: the kernel's source and, transitively, every @jit function it calls and every global
value it reads; the signature, specialisation, constexprs, options, target and compiler
version. Entry: `<dir>/<key[:2]>/<key>/` holding the stages' text, the cubin once loaded, and
`meta.json` with a checksum of each file. Files are written to a temporary name and renamed
into place, so concurrent writers never expose a partial file; an entry whose checksums do not
match is removed and rebuilt. An unwritable directory only costs the cache (one warning).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import threading
import types
import warnings
from typing import Any, Dict, List, Optional, Tuple

from .. import _tiles
from ..core import dtype as _dtype


def _compiler_version() -> str:
    """The native build and the Python frontend's sources: a new compiler never reads old entries."""
    h = hashlib.sha256(f"tiles-{_tiles.__version__}-{_tiles.BUILD_ID}".encode())
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("core.py", "semantic.py", "language.py", "libdevice.py", "frontend.py", "compiler.py"):
        try:
            with open(os.path.join(pkg, name), "rb") as f:
                h.update(f.read())
        except OSError:
            pass
    return h.hexdigest()


VERSION = _compiler_version()


def triton_key() -> str:
    """Triton's name for what identifies the compiler in cache keys (torch's inductor puts it in
    its own): tiles' version and build, which change whenever compiled code could."""
    return f"tiles-{_tiles.__version__}-{VERSION}"
_warned = set()
_lock = threading.Lock()


def cache_dir() -> str:
    d = os.environ.get("TILES_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tiles")


def enabled() -> bool:
    return os.environ.get("TILES_CACHE", "1") not in ("0", "")


def _value_fingerprint(v: Any) -> Optional[str]:
    from ..core import constexpr, dtype

    if isinstance(v, constexpr):
        v = v.value
    if isinstance(v, (bool, int, float, str, type(None))):
        return repr(v)
    if isinstance(v, dtype):
        return f"dtype:{v}"
    if isinstance(v, (tuple, list)):
        parts = [_value_fingerprint(x) for x in v]
        return None if None in parts else f"{type(v).__name__}({','.join(parts)})"
    code = getattr(v, "__code__", None)
    if code is not None and not getattr(v, "_tiles_builtin", False):
        return "code:" + _code_fingerprint(code)
    return None


def _code_fingerprint(code) -> str:
    """A hash of a code object that is the same in every process (nested code objects are
    hashed by their contents, not by their repr, which holds addresses)."""
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            h.update(_code_fingerprint(c).encode())
        else:
            h.update(repr(c).encode())
    return h.hexdigest()[:16]


def _code_names(code: types.CodeType) -> set:
    """The global, attribute and closure names a code object (and those nested in it) reads."""
    names = set(code.co_names) | set(code.co_freevars)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _names_read(src, g: Dict[str, Any]):
    """The names a function's body, defaults and annotations read (sorted), the (global name,
    attribute) pairs it may read (decorators are not the kernel), and the names the body alone
    reads. Where the source is the one Python compiled, its code object lists the body's
    names: pairs are then every such name of every global the body names (a superset: extra
    pairs only add to the key), and no walk over the body's AST is needed, which is most of a
    small kernel's fingerprint. A replaced source text is walked."""
    arg_nodes = list(ast.walk(src.node.args))
    names = {n.id for n in arg_nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if src.from_code:
        body = _code_names(src.fn.__code__)
        names |= body
        attrs = sorted(body)
        pairs = [(b, a) for b in sorted(names) if b in g for a in attrs]
        return sorted(names), pairs, body
    body_nodes = [n for part in src.node.body for n in ast.walk(part)]
    body = {n.id for n in body_nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    names |= body
    pairs = [(n.value.id, n.attr) for n in arg_nodes + body_nodes
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in g]
    return sorted(names), pairs, body


def function_fingerprint(jitfn) -> str:
    """A hash of the function's source and of everything it uses (computed once per function)."""
    fp = getattr(jitfn, "_fingerprint", None)
    if fp is not None:
        return fp
    from .jit import JITFunction, _from_def

    h = hashlib.sha256()
    seen = set()
    guards: List[GlobalGuard] = []

    def visit(fn: "JITFunction") -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        src = fn.source()
        # The text from the `def` on (what `_unsafe_update_src` takes: the same text is the same
        # key) and the line the `def` is on: a kernel that moved in its file reports other lines
        # (asserts, errors, line info), as Triton's key says too.
        h.update(f"{fn.__module__}.{fn.__name__}@{src.first_line + src.node.lineno - 1}\n".encode())
        h.update(_from_def("".join(src.lines)).encode())
        g = src.globals()
        cells = dict(zip(fn.fn.__code__.co_freevars, fn.fn.__closure__ or ()))
        # Names the body reads are guarded; a parameter's default was taken when the function
        # was defined, so a later change of the global it came from is no change to the kernel.
        names, attributes, body = _names_read(src, g)
        for name in names:
            if name not in g:
                continue
            v = g[name]
            if isinstance(v, JITFunction):
                visit(v)
                continue
            fpv = _value_fingerprint(v)
            if fpv is not None:
                h.update(f"{name}={fpv}\n".encode())
                if name in body:
                    guards.append(GlobalGuard(cells.get(name, fn.fn.__globals__), name, v, fpv))
        for base_name, attr in attributes:
            base = g[base_name]
            try:
                v = getattr(base, attr, None)
            except Exception:  # noqa: BLE001 -- an attribute that cannot be read is not used
                continue
            if isinstance(v, JITFunction):
                visit(v)
            elif type(base).__name__ == "module" and not base_name.startswith(("tl", "triton", "tiles")):
                fpv = _value_fingerprint(v)
                if fpv is not None:
                    h.update(f"{base_name}.{attr}={fpv}\n".encode())

    visit(jitfn)
    fp = h.hexdigest()
    jitfn._global_guards = guards
    jitfn._fingerprint = fp
    return fp


class GlobalGuard:
    """A global (or closure) value a kernel's code and cache key were made with: `where` is the
    module's globals dict (or the closure cell), `value` the object then, `fingerprint` its
    value's (a `tl.constexpr` changed in place changes that, not the object)."""

    __slots__ = ("where", "name", "value", "fingerprint")

    def __init__(self, where: Any, name: str, value: Any, fingerprint: str):
        self.where, self.name, self.value, self.fingerprint = where, name, value, fingerprint

    def current(self) -> Any:
        if isinstance(self.where, dict):
            return self.where.get(self.name, _MISSING)
        try:
            return self.where.cell_contents
        except ValueError:
            return _MISSING


_MISSING = object()


def check_globals(jitfn) -> bool:
    """Raises RuntimeError, as Triton does, where a global value the kernel (or a function it
    calls) was compiled with has changed since: its compiled code and cache key would be
    stale. Rebinding a name to an equal value is no change: the guard then holds the new object,
    and True says so (the native dispatcher, which compares objects, needs them again)."""
    function_fingerprint(jitfn)
    rebound = False
    for g in jitfn._global_guards:
        now = g.current()
        # The same object, and not a `tl.constexpr` whose value may change in place (a dtype's
        # `value` is the dtype itself): nothing to check.
        if now is g.value and (not hasattr(now, "value") or isinstance(now, _dtype)):
            continue
        if now is _MISSING or _value_fingerprint(now) != g.fingerprint:
            shown = "<deleted>" if now is _MISSING else repr(now)
            raise RuntimeError(f"Global variable {g.name} has changed since we compiled this kernel, from "
                               f"{g.value!r} to {shown}")
        if now is not g.value:
            g.value, rebound = now, True
    return rebound


# Environment variables the Rust compiler reads: they change the code, so they are in the key.
_COMPILER_ENV = ("TILES_DISABLE_WGMMA", "TILES_WGMMA_SYNC", "TILES_WGMMA_SMEM_A", "TILES_WGMMA_FP8_SMEM_A",
                 "TILES_WGMMA_NO_PERSISTENT", "TILES_CP_ASYNC_PROXY_FENCE", "TILES_LLVM_ARGS",
                 "TILES_LLVM_DEFAULT_ARGS", "TILES_LLVM_PIPELINE", "TILES_LLVM_CODEGEN_OPT", "TILES_WGMMA_TIED_ZERO",
                 "TILES_LLVM_CHAINS", "TILES_ASSEMBLER", "TILES_SHAPE_OPS_IN_REGISTERS", "TILES_REBASE_POINTERS",
                 "TILES_STMATRIX", "TILES_CARRY_PER_LAYOUT", "TILES_PERSISTENT_MMA_OPERANDS", "TILES_RING_SLOTS",
                 "TILES_NESTED_RING_REUSE")


# The same names as the bytes keys of the environment's own dict (`os.environ._data`, CPython's
# on POSIX): `os.environ.get` encodes each name and decodes each value, 1 µs a name, which was
# a third of a key's time.
_COMPILER_ENV_BYTES = tuple(n.encode() for n in _COMPILER_ENV)


def _compiler_env() -> List[Tuple[str, str]]:
    data = getattr(os.environ, "_data", None)
    if type(data) is dict and os.name == "posix":
        return [(n, v.decode(errors="surrogateescape")) for n, b in zip(_COMPILER_ENV, _COMPILER_ENV_BYTES)
                if (v := data.get(b))]
    return [(n, v) for n in _COMPILER_ENV if (v := os.environ.get(n))]


def kernel_key(jitfn, **parts: Any) -> str:
    h = hashlib.sha256()
    h.update(VERSION.encode())
    h.update(function_fingerprint(jitfn).encode())
    for name, v in _compiler_env():
        h.update(f"\n{name}={v}".encode())
    for k in sorted(parts):
        h.update(f"\n{k}={_stable(parts[k])}".encode())
    return h.hexdigest()


_PLAIN = (str, int, bool, float, type(None))


def _stable(v: Any) -> str:
    t = type(v)
    if t in _PLAIN:  # most of a key: names, types, numbers (what _value_fingerprint says)
        return repr(v)
    if t is dict and all(type(k) is str and type(x) in _PLAIN for k, x in v.items()):
        # A signature or a specialisation: names to plain values, spelled in one go.
        return repr(sorted(v.items()))
    from .jit import JITFunction

    if isinstance(v, JITFunction):
        return "jit:" + function_fingerprint(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_stable(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_stable(x) for x in v) + "]"
    fp = _value_fingerprint(v)
    return fp if fp is not None else repr(v)


def _entry(key: str) -> str:
    return os.path.join(cache_dir(), key[:2], key)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _atomic_write(path: str, data: bytes) -> None:
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _remove(entry: str) -> None:
    for name in ("meta.json", "stages.json", "kernel.cubin"):
        try:
            os.unlink(os.path.join(entry, name))
        except OSError:
            pass


def load(key: str) -> Optional[Dict[str, Any]]:
    """The entry's metadata and stages (and `cubin` bytes if cached), or None."""
    if not enabled():
        return None
    entry = _entry(key)
    try:
        with open(os.path.join(entry, "meta.json"), "rb") as f:
            meta = json.loads(f.read())
        with open(os.path.join(entry, "stages.json"), "rb") as f:
            raw = f.read()
        if _sha(raw) != meta.get("stages_sha"):
            raise ValueError("stages checksum mismatch")
        meta["stages"] = json.loads(raw)
        if meta.get("cubin_sha"):
            try:
                with open(os.path.join(entry, "kernel.cubin"), "rb") as f:
                    cubin = f.read()
                if _sha(cubin) == meta["cubin_sha"]:
                    meta["cubin"] = cubin
                else:
                    raise ValueError("cubin checksum mismatch")
            except (OSError, ValueError):
                meta.pop("cubin_sha", None)
        return meta
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError):
        _remove(entry)
        return None


def store(key: str, meta: Dict[str, Any], stages: Dict[str, str]) -> None:
    if not enabled():
        return
    entry = _entry(key)
    try:
        raw = json.dumps(stages).encode()
        _atomic_write(os.path.join(entry, "stages.json"), raw)
        m = dict(meta, stages_sha=_sha(raw))
        _atomic_write(os.path.join(entry, "meta.json"), json.dumps(m).encode())
    except OSError as e:
        _warn_once(f"tiles: cannot write the kernel cache at {cache_dir()} ({e}); compiling without it")


def store_cubin(key: str, cubin: bytes) -> None:
    if not enabled():
        return
    entry = _entry(key)
    try:
        with open(os.path.join(entry, "meta.json"), "rb") as f:
            meta = json.loads(f.read())
        _atomic_write(os.path.join(entry, "kernel.cubin"), cubin)
        meta["cubin_sha"] = _sha(cubin)
        _atomic_write(os.path.join(entry, "meta.json"), json.dumps(meta).encode())
    except (OSError, ValueError) as e:
        _warn_once(f"tiles: cannot write the kernel cache at {cache_dir()} ({e}); compiling without it")


# -- Triton's file-cache API (`triton.runtime.cache`), for code that stores its own files -------
#
# tiles keeps kernels in the entries above; these classes give programs written against
# Triton's cache managers (a `FileCacheManager` subclass named in `TRITON_CACHE_MANAGER`, files
# put and read by key) a working store of the same shape, under `<cache dir>/files/`.

class CacheManager:
    """A store of files under one key (Triton's abstract `CacheManager`)."""

    def __init__(self, key: str, override: bool = False, dump: bool = False):
        pass

    def get_file(self, filename: str) -> Optional[str]:
        raise NotImplementedError

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        raise NotImplementedError

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        raise NotImplementedError

    def put_group(self, filename: str, group: Dict[str, str]) -> str:
        raise NotImplementedError


class FileCacheManager(CacheManager):
    """Files under `<cache dir>/files/<key>/` (`dump`: `TILES_DUMP_DIR` or `<cache dir>/dump`;
    `override`: `TILES_OVERRIDE_DIR` or `<cache dir>/override`), written atomically; a group
    is a JSON file naming other files' paths."""

    def __init__(self, key: str, override: bool = False, dump: bool = False):
        self.key = key
        if dump:
            base = os.environ.get("TILES_DUMP_DIR") or os.environ.get("TRITON_DUMP_DIR") or \
                os.path.join(cache_dir(), "dump")
        elif override:
            base = os.environ.get("TILES_OVERRIDE_DIR") or os.environ.get("TRITON_OVERRIDE_DIR") or \
                os.path.join(cache_dir(), "override")
        else:
            base = os.path.join(cache_dir(), "files")
        self.cache_dir = os.path.join(base, key)
        if not override:
            os.makedirs(self.cache_dir, exist_ok=True)

    def _make_path(self, filename: str) -> str:
        return os.path.join(self.cache_dir, filename)

    def has_file(self, filename: str) -> bool:
        return os.path.exists(self._make_path(filename))

    def get_file(self, filename: str) -> Optional[str]:
        return self._make_path(filename) if self.has_file(filename) else None

    def put(self, data: Any, filename: str, binary: bool = True) -> str:
        raw = data if isinstance(data, bytes) else str(data).encode()
        path = self._make_path(filename)
        _atomic_write(path, raw)
        return path

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        path = self.get_file(f"__grp__{filename}")
        if path is None:
            return None
        try:
            with open(path) as f:
                children = json.load(f).get("child_paths")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(children, dict):
            return None
        return {name: p for name, p in children.items() if os.path.exists(p)}

    def put_group(self, filename: str, group: Dict[str, str]) -> str:
        return self.put(json.dumps({"child_paths": group}), f"__grp__{filename}", binary=False)


class RemoteCacheBackend:
    """A remote store of files for one key (Triton's abstract `RemoteCacheBackend`)."""

    def __init__(self, key: str):
        pass

    def get(self, filenames: Any) -> Dict[str, bytes]:
        raise NotImplementedError

    def put(self, filename: str, data: bytes) -> None:
        raise NotImplementedError


class RedisRemoteCacheBackend(RemoteCacheBackend):
    """Files in Redis (`TILES_REDIS_HOST`/`TRITON_REDIS_HOST`, `..._PORT`), keyed `<key>:<file>`;
    needs the `redis` package."""

    def __init__(self, key: str):
        import redis

        host = os.environ.get("TILES_REDIS_HOST") or os.environ.get("TRITON_REDIS_HOST", "localhost")
        port = int(os.environ.get("TILES_REDIS_PORT") or os.environ.get("TRITON_REDIS_PORT", "6379"))
        self._key = key
        self._redis = redis.Redis(host=host, port=port)

    def get(self, filenames: Any) -> Dict[str, bytes]:
        names = list(filenames)
        values = self._redis.mget([f"{self._key}:{n}" for n in names])
        return {n: v for n, v in zip(names, values) if v is not None}

    def put(self, filename: str, data: bytes) -> None:
        self._redis.set(f"{self._key}:{filename}", data)


def _manager_class(*names: str):
    """The class a `module:Class` environment variable names, or None."""
    import importlib

    for name in names:
        spec = os.environ.get(name)
        if spec:
            module, _, cls = spec.partition(":")
            return getattr(importlib.import_module(module), cls)
    return None


def _hashed(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def get_cache_manager(key: str) -> CacheManager:
    """The manager for `key`: `knobs.cache.manager_class`, else the class that
    `TILES_CACHE_MANAGER`/`TRITON_CACHE_MANAGER` names (`module:Class`), else FileCacheManager."""
    from .. import knobs

    cls = knobs.cache._kept.get("manager_class") or _manager_class("TILES_CACHE_MANAGER", "TRITON_CACHE_MANAGER") \
        or FileCacheManager
    return cls(_hashed(key))


def get_dump_manager(key: str) -> CacheManager:
    return FileCacheManager(_hashed(key), dump=True)


def get_override_manager(key: str) -> CacheManager:
    return FileCacheManager(_hashed(key), override=True)
