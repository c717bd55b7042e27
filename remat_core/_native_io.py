"""Silencing what native libraries print straight to the process's file descriptors."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

__all__ = ["native_output_silenced"]


@contextlib.contextmanager
def native_output_silenced(stream: str = "stdout") -> Iterator[None]:
    """Send C-level writes to ``stream`` (``"stdout"`` or ``"stderr"``) to the null device inside the block.

    For libraries that print without a setting to stop them: file descriptor
    1 or 2 is pointed at the null device and restored afterwards. Python-level
    output is flushed first. Without that descriptor nothing is changed.
    """
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"`stream` must be 'stdout' or 'stderr'; got {stream!r}")
    fd = 1 if stream == "stdout" else 2        # where native code writes, whatever sys.<stream> is now
    py = getattr(sys, stream)
    if py is not None:
        py.flush()
    try:
        saved = os.dup(fd)
    except OSError:   # no such descriptor: nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
