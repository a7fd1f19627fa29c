"""Compiles submitted to an executor while a `with AsyncCompileMode(executor):` block is open
(Triton's `triton.AsyncCompileMode`): `kernel.warmup(...)` runs the kernel's frontend (which
holds the GIL) and returns a `FutureKernel`; the rest of the compile (passes, LLVM, PTX, the
driver's cubin and the module's load: without the GIL) runs on the executor, so a thread pool
compiles on all cores while the submitting thread builds the next kernel's IR. A launch waits
for its own kernel only. Leaving the block waits for every compile and raises the first error
(unless `ignore_errors`)."""

from __future__ import annotations

import contextvars
import sys
from concurrent.futures import Executor, Future, as_completed
from typing import Any, Callable, Dict, List, Optional

_active: contextvars.ContextVar[Optional["AsyncCompileMode"]] = contextvars.ContextVar("tiles_async_compile",
                                                                                       default=None)


def active_mode() -> Optional["AsyncCompileMode"]:
    return _active.get()


class FutureKernel:
    """A kernel being compiled; `result()` waits for it and returns the compiled kernel."""

    def __init__(self, future: Future, finish: Callable[[Any], Any]):
        self._future = future
        self._finish = finish
        self._done: Any = None

    def done(self) -> bool:
        return self._future.done()

    def result(self, ignore_errors: bool = False):
        if self._done is not None:
            return self._done
        try:
            value = self._future.result()
        except Exception:
            if ignore_errors:
                return None
            raise
        self._done = self._finish(value)
        return self._done


class AsyncCompileMode:
    """`with AsyncCompileMode(ThreadPoolExecutor(8)): k1.warmup(...); k2.warmup(...)`."""

    def __init__(self, executor: Executor, *, ignore_errors: bool = False):
        self.executor = executor
        self.ignore_errors = ignore_errors
        self._futures: Dict[Any, FutureKernel] = {}
        self._raw: List[Future] = []
        self._token = None
        self._interval = 0.005

    def submitted(self, key: Any) -> Optional[FutureKernel]:
        """The compile already submitted for `key`, if any."""
        return self._futures.get(key)

    def submit(self, key: Any, compile_fn: Callable[[], Any], finish: Callable[[Any], Any]) -> FutureKernel:
        """The compile for `key`, submitted once however often it is asked for."""
        fk = self._futures.get(key)
        if fk is None:
            raw = self.executor.submit(compile_fn)
            self._raw.append(raw)
            fk = self._futures[key] = FutureKernel(raw, finish)
            raw._tiles_key = key
        return fk

    def __enter__(self) -> "AsyncCompileMode":
        if _active.get() is not None:
            raise RuntimeError("another AsyncCompileMode is already active")
        self._token = _active.set(self)
        # A pool thread back from the GIL-free stages needs the GIL briefly while the submitting
        # thread runs frontends: a short switch interval keeps that wait short (as compile_many).
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._interval, 0.0002))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            for raw in as_completed(self._raw):
                self._futures[raw._tiles_key].result(self.ignore_errors)
        finally:
            sys.setswitchinterval(self._interval)
            _active.reset(self._token)
