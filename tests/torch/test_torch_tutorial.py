"""The PyTorch tutorial's code blocks run and print what the page says."""

import contextlib
import io
import os
import re

import pytest

torch = pytest.importorskip("torch")

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")


def test_tutorial_torch_runs_and_comments_match_output():
    import remat_core

    if not {"lp-rounding"} <= set(remat_core.available_methods()):
        pytest.skip("lp-rounding is not registered")
    text = open(os.path.join(DOCS, "tutorial_torch.rst")).read()
    blocks = [re.sub(r"^    ", "", b, flags=re.M)
              for b in re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", text)]
    env: dict = {}
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "tutorial_torch.rst", "exec"), env)
        expected = [c.strip() for line in block.splitlines() if line.strip().startswith("print(")
                    for c in re.findall(r"#\s*(.*)$", line)]
        assert out.getvalue().split("\n")[: len(expected)] == expected
