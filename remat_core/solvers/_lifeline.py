"""Child processes that die with their parent, and temporary folders that go with them.

A solve may start a child process (the portfolio's branch-and-cut, a
deadline child) that works in a temporary folder, and a sweep runs its solves
in pool workers that may start such children in turn. Whatever ends the parent, neither may outlive it:

* normal return, an exception, ``KeyboardInterrupt``: the parent's ``finally``
  kills the child and removes the folder;
* ``SIGTERM``, ``SIGKILL`` or any other death of the parent: the child notices
  (Linux: ``prctl(PR_SET_PDEATHSIG)`` sends it ``SIGTERM``; everywhere: a
  thread that watches ``os.getppid()``, which runs while the main thread is in
  HiGHS, since highspy releases the GIL there), removes its folder and exits.

The portfolio's parent installs no ``SIGTERM`` handler: Python runs handlers
only when the main thread is between bytecodes, so one would hold off
``SIGTERM`` for as long as HiGHS's MILP runs in that thread (minutes), where
the default action ends the parent at once and the child follows within
:data:`_POLL_S`. A parent whose main thread only waits for its child (in
Python) may register a clean-up with :func:`track` instead: ``SIGTERM`` then
runs it before the process dies of the signal.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from typing import Callable

__all__ = ["die_with_parent", "track", "untrack"]

#: How often the child's watcher thread checks that its parent lives (seconds).
_POLL_S = 0.1

_cleanups: dict[int, Callable[[], None]] = {}
_lock = threading.RLock()   # re-entrant: the handler may run while the main thread holds it
_installed: list = []   # [previous SIGTERM handler] while ours is installed
_leaving = threading.RLock()   # held by the one thread that runs die_with_parent's exit
_leave_depth: list = []   # one entry per call of that exit in that thread


def _run_cleanups() -> None:
    """Run and forget every clean-up registered by :func:`track` (each at most once, errors ignored)."""
    # a timeout, not a plain `with`: the watcher thread may get here while the main thread holds the lock
    locked = _lock.acquire(timeout=1.0)
    try:
        pending = list(_cleanups.values())
        _cleanups.clear()
    finally:
        if locked:
            _lock.release()
    for cleanup in pending:
        try:
            cleanup()
        except Exception:
            pass


def _on_sigterm(signum, frame) -> None:   # pragma: no cover - exercised by the subprocess tests
    _run_cleanups()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _installed.clear()
    os.kill(os.getpid(), signal.SIGTERM)   # die of the signal, as without this handler


def track(cleanup: Callable[[], None]) -> int:
    """Run ``cleanup`` (kill a child, remove its folder) if this process gets ``SIGTERM`` before :func:`untrack`.

    Returns a key for :func:`untrack`. The handler is installed only in the
    main thread and only over the default disposition (an application's own
    handler is left alone; its ``finally`` blocks then clean up).
    """
    with _lock:
        key = id(cleanup)
        _cleanups[key] = cleanup
        if not _installed and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                    _installed.append(signal.signal(signal.SIGTERM, _on_sigterm))
            except (ValueError, OSError):   # not the main interpreter, or no signals here
                pass
    return key


def untrack(key: int) -> None:
    """Forget a clean-up registered by :func:`track`; the last one restores the default ``SIGTERM`` handling."""
    with _lock:
        _cleanups.pop(key, None)
        if not _cleanups and _installed and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                    signal.signal(signal.SIGTERM, _installed[0])
            except (ValueError, OSError):
                pass
            _installed.clear()


def die_with_parent(parent_pid: int, folder: str | None = None) -> None:
    """In a child process: exit (after removing ``folder``) as soon as process ``parent_pid`` is gone.

    Call it first thing in the child. Three ways, so that one that fails
    does not matter: on Linux the kernel sends ``SIGTERM`` when the parent
    dies (``PR_SET_PDEATHSIG``); the ``SIGTERM`` handler runs the clean-ups
    registered with :func:`track` (this process's own children), removes
    ``folder`` and exits; a daemon thread polls ``os.getppid()`` and does the same
    (it runs whenever the main thread is in Python or in a solver call that
    releases the GIL).
    """
    def leave(code: int) -> None:
        # the signal handler and the watcher usually both get here; the second waits for the first to exit,
        # rather than exiting while the first is still killing a child or removing a folder. A second SIGTERM
        # while this thread is on its way out returns to the first exit (re-entrant lock, depth count)
        if not _leaving.acquire(blocking=False):
            while True:
                time.sleep(1.0)
        _leave_depth.append(1)
        if len(_leave_depth) > 1:
            _leave_depth.pop()
            _leaving.release()
            return
        _run_cleanups()   # this process's own children and folders (a sweep worker's deadline child)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(code)

    signal.signal(signal.SIGTERM, lambda signum, frame: leave(128 + signal.SIGTERM))
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:   # the parent died before the line above
        leave(1)

    def watch() -> None:
        while True:
            time.sleep(_POLL_S)
            if os.getppid() != parent_pid:
                leave(1)

    threading.Thread(target=watch, name="remat-parent-watch", daemon=True).start()


def post_result(result_path: str, payload) -> None:
    """Write a worker's pickled ``payload`` to ``result_path`` atomically (the parent never reads half a file)."""
    import pickle

    part = result_path + ".part"
    with open(part, "wb") as f:
        pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(part, result_path)
