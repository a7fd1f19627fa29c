"""GPU-time profiles of scopes and kernel launches, written as a tree: the parts of Triton's
`triton.profiler` (proton) API that scripts use to time their kernels:

    import tiles.profiler as proton
    proton.start("matmul", hook="triton")   # `hook="triton"`: every tiles launch is a node
    with proton.scope("cublas", {"flops16": 2 * M * N * K}):
        ...
    proton.finalize()                        # writes matmul.hatchet (JSON)
    # tiles.profiler.viewer.parse / print_tree, or `python -m tiles.profiler.viewer matmul.hatchet`

Each scope and each launch is timed with a pair of CUDA events on its stream, so a node's time
is the GPU time between its two ends (for back-to-back launches, their kernels' time; in the
interpreter, host time). Scopes
nest; a launch inside scopes is a child of the innermost one, named by the kernel's
`launch_metadata(grid, kernel, args)["name"]` (else the kernel's name), whose other entries
(`flops16`, `bytes`, ...) are summed into the node as metrics. Nothing is timed while no session
is active (`deactivate`), so warm-up runs can stay out of a profile.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from typing import Any, Dict, List, Optional

__all__ = ["start", "activate", "deactivate", "finalize", "scope", "enter_scope", "exit_scope", "cpu_timed_scope"]

_lock = threading.Lock()
_sessions: Dict[int, "_Session"] = {}
_tls = threading.local()
_free_events: List[int] = []
_PENDING_LIMIT = 4096  # records held before the oldest are resolved (bounds live events)


def _on_gpu() -> bool:
    """CUDA events where kernels run on the GPU; host clocks in the interpreter."""
    on = _state.get("gpu")
    if on is None:
        from ..runtime import driver
        from ..runtime.jit import env_flag

        on = _state["gpu"] = not env_flag("INTERPRET") and driver.available()
    return on


_state: Dict[str, Any] = {}


class _HostEvent:
    __slots__ = ("ns",)

    def __init__(self):
        self.ns = 0


def _event():
    if _free_events:
        return _free_events.pop()
    if _on_gpu():
        from .. import _tiles

        return _tiles.cuda_event_create()
    return _HostEvent()


def _mark(ev, stream: int) -> None:
    if isinstance(ev, _HostEvent):
        ev.ns = time.perf_counter_ns()
    else:
        from .. import _tiles

        _tiles.cuda_event_record(ev, stream)


def _elapsed_ms(start, end) -> float:
    if isinstance(start, _HostEvent):
        return (end.ns - start.ns) / 1e6
    from .. import _tiles

    return _tiles.cuda_event_elapsed_ms(start, end)


def _stream() -> int:
    if not _on_gpu():
        return 0
    from ..runtime import driver

    return int(driver.current_stream() or 0)


class _Node:
    __slots__ = ("name", "children", "metrics")

    def __init__(self, name: str):
        self.name = name
        self.children: Dict[str, _Node] = {}
        self.metrics: Dict[str, float] = {}

    def child(self, path) -> "_Node":
        node = self
        for name in path:
            nxt = node.children.get(name)
            if nxt is None:
                nxt = node.children[name] = _Node(name)
            node = nxt
        return node

    def to_json(self) -> Dict[str, Any]:
        return {"frame": {"name": self.name, "type": "function"}, "metrics": dict(self.metrics),
                "children": [c.to_json() for c in self.children.values()]}


class _Session:
    def __init__(self, name: str, hook: Optional[str]):
        self.name = name
        self.hook = hook
        self.active = True
        self.root = _Node("ROOT")


# Timed records not yet read back: (sessions, path, start event, end event, metrics).
_pending: List[Any] = []


def _record(sessions, path, start: int, end: int, metrics: Dict[str, Any]) -> None:
    _pending.append((sessions, tuple(path), start, end, metrics))
    if len(_pending) > _PENDING_LIMIT:
        _resolve(_PENDING_LIMIT // 2)


def _resolve(keep: int = 0) -> None:
    """Reads back the oldest records (waiting for their events) until `keep` remain."""
    n = len(_pending) - keep
    done = _pending[:n]
    del _pending[:n]
    for sessions, path, start, end, metrics in done:
        ms = _elapsed_ms(start, end)
        for s in sessions:
            m = s.root.child(path).metrics
            m["time (ns)"] = m.get("time (ns)", 0.0) + ms * 1e6
            m["count"] = m.get("count", 0) + 1
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    m[k] = m.get(k, 0) + v
        _free_events.extend((start, end))


def _active() -> List[_Session]:
    return [s for s in _sessions.values() if s.active]


def _stack() -> List[Any]:
    st = getattr(_tls, "stack", None)
    if st is None:
        st = _tls.stack = []
    return st


class _LaunchHook:
    """Times every tiles launch while a session with `hook="triton"` is active."""

    def enter(self, fn, grid, args, compiled, stream):
        sessions = [s for s in _active() if s.hook]
        if not sessions:
            return None
        meta: Dict[str, Any] = {}
        md = getattr(fn, "launch_metadata", None)
        if md is not None:
            meta = dict(md(grid, compiled, dict(zip(fn.param_names, args))) or {})
        name = str(meta.pop("name", compiled.name))
        start = _event()
        _mark(start, int(stream or 0))
        return sessions, name, meta, start, int(stream or 0)

    def exit(self, token) -> None:
        if token is None:
            return
        sessions, name, meta, start, stream = token
        end = _event()
        _mark(end, stream)
        _record(sessions, [n for n, *_ in _stack()] + [name], start, end, meta)


_hook = _LaunchHook()


def start(name: Optional[str] = None, *, context: str = "shadow", data: str = "tree", backend: Optional[str] = None,
          mode: Optional[str] = None, hook: Optional[str] = None) -> int:
    """Starts (and activates) a profiling session; its profile goes to `<name>.hatchet`.
    `hook="triton"` records every kernel launch. Returns the session's id."""
    from ..runtime.jit import _launch_hooks, add_launch_hook

    with _lock:
        sid = max(_sessions, default=-1) + 1
        _sessions[sid] = _Session(name or "proton", hook)
        if hook and _hook not in _launch_hooks:
            add_launch_hook(_hook)
    return sid


def _select(session: Optional[int]) -> List[_Session]:
    if session is None:
        return list(_sessions.values())
    s = _sessions.get(session)
    return [s] if s is not None else []


def activate(session: Optional[int] = None) -> None:
    """Resumes recording (all sessions, or one)."""
    for s in _select(session):
        s.active = True


def deactivate(session: Optional[int] = None, flushing: bool = False) -> None:
    """Pauses recording (all sessions, or one)."""
    for s in _select(session):
        s.active = False


def finalize(session: Optional[int] = None, output_format: str = "hatchet") -> None:
    """Ends sessions (all, or one) and writes each profile to `<name>.hatchet`."""
    from ..runtime.jit import remove_launch_hook

    with _lock:
        ids = list(_sessions) if session is None else [session]
        for sid in ids:
            s = _sessions.pop(sid, None)
            if s is None:
                continue
            _resolve()
            _fill_totals(s.root)
            path = s.name if s.name.endswith("." + output_format) else f"{s.name}.{output_format}"
            with open(path, "w") as f:
                json.dump([s.root.to_json(), {"tiles": {"time": "GPU time between CUDA events per node"}}], f)
        if not any(s.hook for s in _sessions.values()):
            remove_launch_hook(_hook)


def _fill_totals(node: _Node) -> Dict[str, float]:
    """A node without measurements of its own (the root, a scope entered while inactive) gets
    its children's sums."""
    sums: Dict[str, float] = {}
    for c in node.children.values():
        for k, v in _fill_totals(c).items():
            sums[k] = sums.get(k, 0) + v
    if "time (ns)" not in node.metrics:
        for k, v in sums.items():
            node.metrics.setdefault(k, v)
    return node.metrics


def enter_scope(name: str, *, triton_op: bool = False, metrics: Optional[Dict[str, Any]] = None) -> None:
    sessions = _active()
    ev = None
    if sessions:
        ev = _event()
        _mark(ev, _stream())
    _stack().append((str(name), ev, sessions, dict(metrics or {})))


def exit_scope(triton_op: bool = False, metrics: Optional[Dict[str, Any]] = None) -> None:
    st = _stack()
    if not st:
        raise RuntimeError("tiles.profiler: exit_scope without a matching enter_scope")
    path = [n for n, *_ in st]
    name, start, sessions, m = st.pop()
    if metrics:
        m.update(metrics)
    if start is None:
        return
    end = _event()
    _mark(end, _stream())
    _record(sessions, path, start, end, m)


class scope:
    """`with scope(name, metrics): ...` or `@scope(name)`: a node timed on the GPU."""

    def __init__(self, name: str, metrics: Optional[Dict[str, Any]] = None):
        self.name = name
        self.metrics = metrics

    def __enter__(self):
        enter_scope(self.name, metrics=self.metrics)
        return self

    def __exit__(self, *exc):
        exit_scope()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with scope(self.name, self.metrics):
                return fn(*args, **kwargs)

        return wrapped


cpu_timed_scope = scope
