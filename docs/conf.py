"""Sphinx configuration for remat.

The build generates what it shows from the library itself (``docs/_ext/remat_docs.py``):
the figures of the concepts pages and the landing page, and the CLI reference
(from :func:`remat_core.cli.build_parser`). Math is rendered by MathJax 3
shipped with the ``sphinx-mathjax-offline`` package: no network needed.
``nitpicky`` is on and ``make docs`` turns warnings into errors.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "remat"
author = "remat developers"
release = "0.1.0"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static: math renders offline
    "sphinx.ext.viewcode",
    "numpydoc",
    "remat_docs",
]
autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
exclude_patterns = ["_build", "_generated/*.rst"]
templates_path = ["_templates"]
html_theme = "furo"
html_title = "remat"
html_static_path = ["_static"]
html_css_files = ["remat.css"]
pygments_style = "friendly"

nitpicky = True
# Docstrings name types the way numpydoc does ("int, optional", "array-like") and cite private helpers
# by name; neither is a page to link to.
nitpick_ignore_regex = [
    (r"py:.*", r"(.*\.)?_[A-Za-z_].*"),   # private names (module-level helpers and constants)
    (r"py:class", r"(optional|default.*|array-like|array_like|callable|iterable|sequence|mapping|path|"
                  r"file-like|path-like|scalar|ndarray|numpy\..*|np\..*|torch\..*|keras\..*|tf\..*|"
                  r"matplotlib\..*|distributed\..*|tqdm.*|os\.PathLike)"),
]
# Docstrings in the code name their module's helpers by their short names; Sphinx resolves those against
# the package (where the API pages put them), not the module, so these stay plain text.
nitpick_ignore = [
    ("py:func", "graph_key"), ("py:func", "budget_grid"), ("py:attr", "budget_bytes"),
    ("py:attr", "budget_rows"), ("py:attr", "RematResult.schedule"), ("py:func", "start_child"),
    ("py:meth", "Graph.save"), ("py:class", "Module"), ("py:class", "RematError"),
    ("py:data", "CPU_KERNEL_SCRATCH_BYTES"), ("py:data", "AUTO_FALLBACK_TIME_LIMIT_S"),
    ("py:func", "activation_peak_bytes"),
    # remat_torch.dtr is the live-DTR function (documented); it hides the module of the same name
    ("py:mod", "remat_torch.dtr"),
    ("py:func", "time.perf_counter"),  # the standard library (no intersphinx: the build needs no network)
]
suppress_warnings = ["autosummary.import_cycle"]
