"""The Keras tutorial's code blocks run and print what the page says (tests/test_docs.py runs it only with -m slow)."""

import contextlib
import io
import os

import pytest

pytest.importorskip("tensorflow")

from test_docs import DOCS, _expected, python_blocks  # noqa: E402  (tests/ is on sys.path: conftest.py)


def test_tutorial_keras_runs_and_comments_match_output():
    env: dict = {"__name__": "__main__"}
    for i, block in enumerate(python_blocks(os.path.join(DOCS, "tutorial_keras.rst"))):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, f"tutorial_keras.rst block {i + 1}", "exec"), env)
        expected = _expected(block)
        assert expected and out.getvalue().splitlines()[: len(expected)] == expected, block
