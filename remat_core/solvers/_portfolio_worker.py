"""The branch-and-cut side of :mod:`remat_core.solvers.portfolio`, run as ``python -m`` in a child process.

Reads the pickled job (program, start, absolute deadline, gap, options) from
its first argument and writes ``("ok", BackendResult)`` or ``("error",
message)`` to its second, through a temporary name so that the parent never
reads half a file. Schedules pass to and from the parent's MILP through two
mailbox files in the job's directory (:class:`~remat_core.solvers.portfolio._Mailbox`).
Its third argument is the parent's pid: when that process dies (even of
``SIGKILL``), this one removes the job's directory and exits
(:func:`~remat_core.solvers._lifeline.die_with_parent`).
"""

from __future__ import annotations

import os
import pickle
import sys
import time


def main(argv: list[str]) -> int:
    from remat_core.solvers._lifeline import die_with_parent, post_result

    job_path, result_path = argv[1], argv[2]
    if len(argv) > 3:   # the parent's pid: this process and the job's folder do not outlive it

        die_with_parent(int(argv[3]), os.path.dirname(os.path.abspath(job_path)))
    try:
        with open(job_path, "rb") as f:
            job = pickle.load(f)
        from remat_core.solvers.branch_and_cut import branch_and_cut
        from remat_core.solvers.portfolio import _TO_BC, _TO_MILP, _Mailbox

        folder = os.path.dirname(os.path.abspath(job_path))
        outbox, inbox = _Mailbox(os.path.join(folder, _TO_MILP)), _Mailbox(os.path.join(folder, _TO_BC))

        def receive():
            got = inbox.fetch()
            return None if got is None else got[1]

        limit = None if job["deadline_epoch"] is None else max(job["deadline_epoch"] - time.time(), 0.01)
        out = branch_and_cut(job["sf"], start=job["start"], time_limit_s=limit, mip_rel_gap=job["mip_rel_gap"],
                             threads=1, share=outbox.post, receive=receive, **job["options"])
        payload = ("ok", out)
    except Exception as exc:   # reported to the parent, which goes on with the MILP alone
        payload = ("error", f"{type(exc).__name__}: {exc}")
    post_result(result_path, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
