"""Blocking calls into the client library that Ctrl-C (or SIGTERM) can
interrupt. The library releases the GIL while it waits on the servers or
on the other ranks, but a signal's Python handler runs only when the main
thread is back in the interpreter: a push blocked on a stopped server
would hold Ctrl-C off until its deadline. So the main thread hands each
call to a worker thread and waits for the reply in short slices, in which
the handlers run: KeyboardInterrupt (or SystemExit) is raised within about
a tenth of a second, the engine's exit handlers stop what initialize
started, and the abandoned call ends at its own deadline on its (daemon)
thread, which keeps its buffers alive until then.

Calls from other threads (stage 3's prefetch) run where they are."""

import queue
import threading

_SLICE_S = 0.1


class _Worker:
    def __init__(self, pool):
        self._pool = pool
        self._tasks = queue.SimpleQueue()
        t = threading.Thread(target=self._loop, daemon=True,
                             name="zeroshard-call")
        t.start()

    def _loop(self):
        while True:
            fn, args, kwargs, reply = self._tasks.get()
            try:
                reply.put((True, fn(*args, **kwargs)))
            except BaseException as e:   # handed to the caller
                reply.put((False, e))
            del fn, args, kwargs, reply
            self._pool._idle.append(self)

    def call(self, fn, args, kwargs):
        reply = queue.SimpleQueue()
        self._tasks.put((fn, args, kwargs, reply))
        while True:
            try:
                ok, value = reply.get(timeout=_SLICE_S)
                break
            except queue.Empty:
                continue
        if ok:
            return value
        raise value


class _Pool:
    """Idle workers; one still busy with an abandoned call is not reused
    until that call returns."""

    def __init__(self):
        self._idle = []

    def call(self, fn, args, kwargs):
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        try:
            w = self._idle.pop()
        except IndexError:
            w = _Worker(self)
        return w.call(fn, args, kwargs)


_pool = _Pool()


class Interruptible:
    """`obj` (a _zeroshard.Cluster or Group) whose methods run through the
    pool; its other attributes are its own."""

    def __init__(self, obj):
        self.__dict__["_obj"] = obj

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            return _pool.call(attr, args, kwargs)
        call.__name__ = name
        return call


def unwrap(obj):
    """The extension's own object behind an Interruptible (None stays
    None), for passing to another binding."""
    if isinstance(obj, Interruptible):
        return obj.__dict__["_obj"]
    return obj
