"""The child side of :mod:`remat_core.solvers._deadline`, run as ``python -m``.

Reads the pickled job (method, graph, budget, options) from its first
argument, runs :func:`remat_core.solve` and writes ``("ok", RematResult)`` or
``("error", message)`` to its second, through a temporary name so that the
parent never reads half a file.
"""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> int:
    job_path, result_path = argv[1], argv[2]
    from remat_core.solvers._lifeline import die_with_parent, post_result

    die_with_parent(int(argv[3]) if len(argv) > 3 else os.getppid(), os.path.dirname(os.path.abspath(job_path)))
    try:
        with open(job_path, "rb") as f:
            job = pickle.load(f)
        from remat_core.solvers import solve

        payload = ("ok", solve(job["graph"], job["budget_bytes"], method=job["method"], **job["options"]))
    except Exception as exc:   # reported to the parent, which goes on with what it has
        payload = ("error", f"{type(exc).__name__}: {exc}")
    post_result(result_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
