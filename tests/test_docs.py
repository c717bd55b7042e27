"""The core tutorial's code blocks run, and print what the page says they print."""

import contextlib
import io
import os
import re

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs")


def code_blocks(page):
    text = open(os.path.join(DOCS, page)).read()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", text)
    return [re.sub(r"^    ", "", b, flags=re.M) for b in blocks]


def test_tutorial_core_runs_and_comments_match_output():
    run_page("tutorial_core.rst")


def test_tutorial_keras_runs_and_comments_match_output():
    import pytest

    pytest.importorskip("tensorflow")
    run_page("tutorial_keras.rst")


def run_page(page):
    env: dict = {}
    for block in code_blocks(page):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, page, "exec"), env)
        expected = [c.strip() for line in block.splitlines() if line.strip().startswith("print(")
                    for c in re.findall(r"#\s*(.*)$", line)]
        printed = out.getvalue().split("\n")[: len(expected)]
        assert [e.split(" (")[0] for e in expected] == printed
