"""Sphinx configuration for remat."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "remat"
author = "remat developers"
release = "0.1.0"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]
autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
exclude_patterns = ["_build"]
templates_path = ["_templates"]
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["autosummary.import_cycle"]
