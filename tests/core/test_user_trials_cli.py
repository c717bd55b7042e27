"""The `remat` command on inputs engineer T tried as a user (impossible budgets)."""

import pytest

from remat_core.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_max_batch_says_what_batch_one_needs_when_nothing_fits(capsys):
    code, out, err = run(capsys, "max-batch", "vgg16", "--budget", "1GiB", "--method", "checkpoint-all",
                         "--no-progress")
    assert code == 1 and "largest batch size 0" in out
    assert "1.08 GiB" in out + err          # vgg16 at batch 1 needs >= 1158842688 bytes


def test_a_budget_below_the_fixed_memory_is_not_a_negative_fraction(capsys):
    code, out, _ = run(capsys, "solve", "vgg16", "1B", "--batch-size", "1", "--method", "checkpoint-all")
    assert code == 1 and "budget    1 B" in out
    assert "(-" not in out
