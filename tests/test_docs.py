"""Every code example of README.md and docs/*.rst runs, every CLI example exits 0, and the docs build.

Python examples: the ``python`` blocks of a page run in order, in one fresh
interpreter (in a temporary folder), as a reader would paste them. On the pages
in ``CHECKED``, a ``print(...)  # text`` line must print ``text`` (up to a
`` (`` that starts a remark). CLI examples: the ``$ remat ...`` lines of
``console`` blocks (and ``remat ...`` lines of ``bash`` blocks and ``::``
blocks) run in order in one temporary folder and must exit 0.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = sorted(glob.glob(os.path.join(DOCS, "*.rst"))) + [os.path.join(ROOT, "README.md")]
# pages whose `print(...)  # expected` comments are checked against the output
CHECKED = {"index.rst", "tutorial_core.rst", "choosing.rst", "concepts.rst", "cli.rst", "README.md"}
# `make demo` runs the demo (minutes); every other CLI example runs here
NOT_RUN = ("remat demo",)
# pages whose examples train framework models for a minute or more (tests/torch/test_torch_tutorial.py also runs
# the PyTorch one): run with -m slow
SLOW_PAGES = {"tutorial_torch.rst", "tutorial_keras.rst"}
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))


def _name(path: str) -> str:
    return os.path.basename(path)


def python_blocks(path: str) -> list[str]:
    text = open(path).read()
    if path.endswith(".md"):
        return re.findall(r"```python\n(.*?)```", text, flags=re.S)
    blocks = re.findall(r"\.\. code-block:: python\n((?:\n|[ \t]+.*\n)+)", text)
    return [textwrap.dedent(b).strip("\n") + "\n" for b in blocks]


def cli_examples(path: str) -> list[str]:
    text = open(path).read()
    if path.endswith(".md"):
        blocks = re.findall(r"```(?:bash|console|sh)\n(.*?)```", text, flags=re.S)
    else:
        blocks = re.findall(r"(?:\.\. code-block:: (?:console|bash|shell)|::)\n((?:\n|[ \t]+.*\n)+)", text)
    out = []
    for block in blocks:
        for line in textwrap.dedent(block).splitlines():
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            line = re.sub(r"\s+#.*$", "", line)
            if line.startswith("remat ") and not line.startswith(NOT_RUN):
                out.append(line)
    return out


def _expected(block: str) -> list[str]:
    return [m.group(1).strip().split(" (")[0] for line in block.splitlines()
            if line.lstrip().startswith("print(") for m in [re.search(r"\)\s+#\s*(.*)$", line)] if m]


_RUNNER = r'''
import json, sys, io, contextlib, os
blocks = json.load(open(sys.argv[1]))
env = {"__name__": "__main__"}
outputs = []
for i, block in enumerate(blocks):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(block, f"block {i + 1}", "exec"), env)
    outputs.append(buf.getvalue())
json.dump(outputs, open(sys.argv[2], "w"))
'''


def _needs(blocks: list[str]) -> list[str]:
    text = "\n".join(blocks)
    mods = {"torch": "torch", "remat_torch": "torch", "tensorflow": "tensorflow", "remat_tf": "tensorflow",
            "keras": "keras", "transformers": "transformers", "matplotlib": "matplotlib"}
    return sorted({m for k, m in mods.items() if re.search(rf"^\s*(from|import) {k}\b", text, flags=re.M)})


PY_PAGES = [p for p in PAGES if python_blocks(p)]
CLI_PAGES = [p for p in PAGES if cli_examples(p)]


def _run_dir(tmp_path):
    """A fresh folder where ``../shared`` is the data folder, as it is from the repository root."""
    run = tmp_path / "run"
    run.mkdir()
    if os.path.isdir(SHARED):
        (tmp_path / "shared").symlink_to(SHARED)
    return run


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if _name(p) in SLOW_PAGES else p
                                  for p in PY_PAGES], ids=_name)
def test_python_examples_run(page, tmp_path):
    blocks = python_blocks(page)
    for mod in _needs(blocks):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{_name(page)} needs {mod}")
    run = _run_dir(tmp_path)
    (run / "blocks.json").write_text(json.dumps(blocks))
    (run / "runner.py").write_text(_RUNNER)
    env = {**os.environ, "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT}
    res = subprocess.run([sys.executable, "runner.py", "blocks.json", "out.json"], cwd=run, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{_name(page)}: {res.stderr[-3000:]}"
    if _name(page) in CHECKED:
        outputs = json.loads((run / "out.json").read_text())
        for block, out in zip(blocks, outputs):
            expected = _expected(block)
            assert out.splitlines()[: len(expected)] == expected, (_name(page), block)


@pytest.mark.parametrize("page", CLI_PAGES, ids=_name)
def test_cli_examples_run(page, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": ROOT}
    run = _run_dir(tmp_path)
    for line in cli_examples(page):
        args = shlex.split(line)[1:]
        res = subprocess.run([sys.executable, "-m", "remat_core.cli", *args], cwd=run, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{_name(page)}: `{line}` exited {res.returncode}: {res.stderr[-2000:]}"
        assert res.stdout.strip(), line


def test_the_pages_have_examples():
    # the extraction itself: a page that loses its examples to a formatting slip would pass silently
    names = {_name(p) for p in PY_PAGES}
    assert {"index.rst", "tutorial_core.rst", "choosing.rst", "README.md"} <= names
    assert {"cli.rst", "zoo_and_sweeps.rst", "README.md"} <= {_name(p) for p in CLI_PAGES}
    assert "remat methods" in cli_examples(os.path.join(DOCS, "cli.rst"))


def test_no_reference_to_files_outside_the_repository():
    for path in PAGES + glob.glob(os.path.join(ROOT, "remat_*", "**", "*.py"), recursive=True):
        assert "DESIGN.md" not in open(path).read(), path


def test_sphinx_build_with_warnings_as_errors_and_nitpicky(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                          "-d", str(tmp_path / "doctrees"), DOCS, str(tmp_path / "html")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "MPLBACKEND": "Agg"})
    assert res.returncode == 0, res.stderr[-5000:]
    index = (tmp_path / "html" / "index.html").read_text()
    assert "_generated/tradeoff.png" in index or "tradeoff.png" in index
    assert (tmp_path / "html" / "_static" / "mathjax" / "tex-chtml.js").exists()  # math renders offline
    assert "cdn.jsdelivr" not in (tmp_path / "html" / "memory_model.html").read_text()
    cli = (tmp_path / "html" / "cli.html").read_text()
    for command in ("remat solve", "remat sweep", "remat max-batch", "remat plot", "remat methods", "remat zoo"):
        assert command in cli
