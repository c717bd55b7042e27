"""The one place that chooses a kernel implementation.

Implementations, in preference order: ``native`` (the C++ module built by pip
from ``native/kernels.cpp``), ``numba``, ``reference`` (pure Python, the spec).
The environment variable ``REMAT_KERNEL=reference|numba|native`` forces one;
:func:`use_kernel` does the same in a ``with`` block. Asking for one that is
not available raises :class:`~remat_core.errors.UnknownMethodError` listing
those that are. By default the first implementation that imports is used and
the others are not imported (numba's import alone takes about 0.13 s, which
the portfolio's child process would pay before its first node).

**A cold numba cache** (no native module, and numba's on-disk cache lacks a
kernel: a fresh tree or install) would compile the kernels inside the first
timed call, 10-25 s of CPU (minutes on a loaded machine, past any
``time_limit_s``). Instead the default implementation is the reference while
a child process compiles numba's kernels into the cache
(``_numba.compile_all``); the calls switch to numba once the cache holds them
(checked at most every ``COLD_RECHECK_S``). The implementations return
identical results, so only the speed changes. If the child ends without
filling the cache, this process stays on the reference. ``REMAT_KERNEL=numba``
(or :func:`use_kernel`) compiles in the process as before.

The kernels import nothing of the project but its errors: they take and
return contiguous int64 / float64 arrays (a graph's CSR adjacency, a
schedule's CSR rows), never a ``Graph`` or a ``Schedule``, so that the three
implementations share one signature and any layer of the core may call them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import time
from types import ModuleType
from typing import Iterator

import numpy as np

from ..errors import UnknownMethodError

__all__ = ["available_kernels", "kernel_name", "compile_numba", "numba_compile_status", "get_kernel", "use_kernel",
           "simulate", "r_given_s", "path_cuts", "dtr", "dtr_sequence"]

# name -> module path, in preference order
_IMPLEMENTATIONS = {
    "native": "remat_core.kernels._native",
    "numba": "remat_core.kernels._numba",
    "reference": "remat_core.kernels._reference",
}
_loaded: dict[str, ModuleType | None] = {}
_forced: list[str] = []


def _load(name: str) -> ModuleType | None:
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(_IMPLEMENTATIONS[name])
        except ImportError:
            _loaded[name] = None
    return _loaded[name]


def available_kernels() -> list[str]:
    """Names of the implementations that import on this machine, preferred first."""
    return [name for name in _IMPLEMENTATIONS if _load(name) is not None]


_preferred: list[str] = []   # the first implementation that imports, found once (imports do not come and go)

#: How often (s) a process waiting for the child compile reads numba's cache index again.
COLD_RECHECK_S = 0.5
# numba's cache state in this process: "ready" once it holds every kernel (or its state cannot be read),
# "proc" the compiling child, "next" when to look again, "gave_up" when the child ended and the cache is cold
_numba_state: dict = {}


def _numba_cached() -> bool:
    """Whether numba's on-disk cache holds every kernel; ``True`` when numba's cache index cannot be read (an
    internal API: then numba compiles at first use, as it did before this check)."""
    try:
        return bool(_load("numba").cached())
    except Exception:   # noqa: BLE001 - any change of numba's internals means "do as before"
        return True


def _start_compile() -> subprocess.Popen | None:
    """A child process that compiles numba's kernels into the on-disk cache (the same cache: it inherits the
    environment, ``NUMBA_CACHE_DIR`` included, and imports this copy of remat_core)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        return subprocess.Popen([sys.executable, "-c", "from remat_core.kernels import _numba; _numba.compile_all()"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None


def _numba_ready() -> bool:
    """Whether the default calls may use numba now (see the module docstring: a cold cache is filled by a child
    process while the calls run the reference)."""
    st = _numba_state
    if st.get("ready"):
        return True
    if st.get("gave_up"):
        return False
    now = time.monotonic()
    if now < st.get("next", -float("inf")):
        return False
    st["next"] = now + COLD_RECHECK_S
    if _numba_cached():
        st["ready"] = True
        return True
    if "proc" not in st:
        st["proc"] = _start_compile()
    proc = st["proc"]
    if proc is None or proc.poll() is not None:   # could not start, or ended with the cache still cold
        st["gave_up"] = True
    return False


def compile_numba() -> None:
    """Compile numba's kernels into its on-disk cache now, in this process, where numba is installed and the
    cache lacks one (``make`` does it after installing, through ``auto.warm_kernels``); later processes load
    them instead of running the reference while a child compiles."""
    if _load("numba") is not None and not _numba_cached():
        _load("numba").compile_all()
    if _numba_cached():
        _numba_state["ready"] = True


def numba_compile_status() -> str:
    """How this process stands with numba's cache: ``"warm"``, ``"compiling"`` (a child fills it; the default
    calls run the reference meanwhile), ``"gave up"`` (this process stays on the reference), or ``"unused"``
    (numba is not the default implementation, or its cache was never checked)."""
    st = _numba_state
    if st.get("ready"):
        return "warm"
    if st.get("gave_up"):
        return "gave up"
    return "compiling" if st.get("proc") is not None else "unused"


def kernel_name() -> str:
    """The implementation the next kernel call will use."""
    wanted = _forced[-1] if _forced else os.environ.get("REMAT_KERNEL")
    if wanted:
        wanted = wanted.strip().lower()
    if wanted:
        if wanted not in _IMPLEMENTATIONS or _load(wanted) is None:
            raise UnknownMethodError(
                f"kernel implementation {wanted!r} is not available; available: {available_kernels()}"
            )
        return wanted
    if not _preferred:   # the first that imports; the others are not imported (numba alone takes ~0.13 s)
        _preferred.append(next(name for name in _IMPLEMENTATIONS if _load(name) is not None))
    if _preferred[0] == "numba" and not _numba_ready():
        return "reference"   # numba's cache is cold: no compile inside a timed call
    return _preferred[0]


def get_kernel(name: str | None = None) -> ModuleType:
    """The kernel module called ``name`` (default: :func:`kernel_name`)."""
    name = name or kernel_name()
    mod = _load(name) if name in _IMPLEMENTATIONS else None
    if mod is None:
        raise UnknownMethodError(f"kernel implementation {name!r} is not available; available: {available_kernels()}")
    return mod


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Force one implementation inside a ``with`` block (overrides ``REMAT_KERNEL``)."""
    get_kernel(name)
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def simulate(n, R_ptr, R_idx, S_ptr, S_idx, dep_ptr, dep_idx, mem, ws, fixed, kernel: str | None = None):
    """Dispatching wrapper of the simulation kernel (see ``_reference.simulate``).

    Converts every array to contiguous int64 first. Callers that already hold
    such arrays (a :class:`~remat_core.Graph` and a
    :class:`~remat_core.Schedule` store nothing else) call
    ``get_kernel(kernel).simulate`` directly and skip the conversions.
    """
    k = get_kernel(kernel)
    return k.simulate(int(n), _i64(R_ptr), _i64(R_idx), _i64(S_ptr), _i64(S_idx), _i64(dep_ptr), _i64(dep_idx),
                      _i64(mem), _i64(ws), int(fixed))


def r_given_s(n, S_ptr, S_idx, dep_ptr, dep_idx, kernel: str | None = None):
    """Dispatching wrapper of the optimal-R-given-S kernel (see ``_reference.r_given_s``)."""
    k = get_kernel(kernel)
    return k.r_given_s(int(n), _i64(S_ptr), _i64(S_idx), _i64(dep_ptr), _i64(dep_idx))


def path_cuts(n, in_ptr, in_idx, W, cum, first, Rcol, Scol, tol, max_cuts, kernel: str | None = None):
    """Dispatching wrapper of the path inequality separation (see ``_reference.path_cuts``): ``(violation,
    row_ptr, row_idx)``. ``W`` and ``cum`` are made contiguous float64, the other arrays int64."""
    k = get_kernel(kernel)
    f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64).ravel()   # noqa: E731
    return k.path_cuts(int(n), _i64(in_ptr), _i64(in_idx), f64(W), f64(cum), _i64(first).ravel(),
                       _i64(Rcol).ravel(), _i64(Scol).ravel(), float(tol), int(max_cuts))


def dtr(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, heuristic, seed, max_computes,
        keep_dead: bool = False, kernel: str | None = None):
    """Dispatching wrapper of the DTR simulation (see ``_reference.dtr``): ``(info, R_ptr, R_idx, S_ptr, S_idx)``.
    ``cost`` is made contiguous float64, the other arrays int64."""
    k = get_kernel(kernel)
    return k.dtr(int(n), _i64(dep_ptr), _i64(dep_idx), _i64(user_ptr), _i64(user_idx), _i64(mem), _i64(ws),
                 np.ascontiguousarray(cost, dtype=np.float64), int(fixed), int(budget), int(heuristic), int(seed),
                 int(max_computes), int(bool(keep_dead)))


def dtr_sequence(n, dep_ptr, dep_idx, user_ptr, user_idx, mem, ws, cost, fixed, budget, order, heuristic, seed,
                 max_cost, hold: bool = True, kernel: str | None = None):
    """Dispatching wrapper of DTR run as a sequence (see ``_reference.dtr_sequence``): ``(info, kind, node,
    total_cost)``. An implementation without this kernel hands it to the next one that has it (the reference
    always does); numba only once its cache is warm (the native module has no such kernel: its calls would
    otherwise compile numba's inside a timed call)."""
    names = [get_kernel(kernel).__name__.rsplit(".", 1)[-1].lstrip("_")]
    names += [nm for nm in _IMPLEMENTATIONS if nm != "numba" or _numba_ready()]
    fn = next(f for f in (getattr(_load(nm), "dtr_sequence", None) if nm in _IMPLEMENTATIONS else None
                          for nm in names) if f is not None)
    return fn(int(n), _i64(dep_ptr), _i64(dep_idx), _i64(user_ptr), _i64(user_idx), _i64(mem), _i64(ws),
              np.ascontiguousarray(cost, dtype=np.float64), int(fixed), int(budget), _i64(order), int(heuristic),
              int(seed), float(max_cost), int(bool(hold)))
