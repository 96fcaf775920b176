"""Explicit tags: ``with culedger.tag("kv_pool"):`` (or ``@culedger.tag("weights")``).

Pure Python over ctypes. The library's ``culedger_push_tag``/``culedger_pop_tag`` are looked up
once in the process's global scope (``dlsym(RTLD_DEFAULT)`` through ``ctypes.CDLL(None)``): they
exist when libculedger.so is preloaded, and the tags then apply to the CUDA allocations the
calling thread makes inside the block. Without culedger the lookup fails once and every tag is
a no-op; nothing is loaded, nothing is raised.

A tag names a category: one of weights, kv_pool, ipc, graphs, comm, other, or a name of the
program's own (1-64 bytes, no whitespace or quotes). Tags nest; the innermost one counts."""
import contextlib
import ctypes
import threading

_lock = threading.Lock()
_fns = None  # (push, pop), or False when culedger is not loaded


def _lookup():
    global _fns
    if _fns is None:
        with _lock:
            if _fns is None:
                try:
                    scope = ctypes.CDLL(None)
                    push, pop = scope.culedger_push_tag, scope.culedger_pop_tag
                    push.argtypes, push.restype = [ctypes.c_char_p], ctypes.c_int
                    pop.argtypes, pop.restype = [], ctypes.c_int
                    _fns = (push, pop)
                except (AttributeError, OSError):
                    _fns = False
    return _fns


def active():
    """True when culedger is loaded in this process (tags take effect)."""
    return bool(_lookup())


class tag(contextlib.ContextDecorator):
    """Attribute the allocations made inside the block (or the decorated function) to `name`."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"culedger.tag() takes a str, not {type(name).__name__}")
        self.name = name
        self._raw = name.encode("utf-8", "replace")

    def __enter__(self):
        fns = _lookup()
        if fns:
            fns[0](self._raw)
        return self

    def __exit__(self, *exc):
        fns = _lookup()
        if fns:
            fns[1]()
        return False

    def __repr__(self):
        return f"culedger.tag({self.name!r})"
