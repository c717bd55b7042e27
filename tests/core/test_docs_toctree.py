"""docs/index.rst puts every page in the sidebar exactly once (issue 36: a hidden catch-all glob listed each twice)."""

import fnmatch
import pathlib

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _toctree_entries(text: str) -> list[list[str]]:
    """The entries of each ``.. toctree::`` of an rst text (options and blank lines skipped)."""
    trees, current = [], None
    for line in text.splitlines():
        if line.startswith(".. toctree::"):
            current = []
            trees.append(current)
        elif current is not None:
            if line and not line.startswith(" "):
                current = None
            elif line.strip() and not line.strip().startswith(":"):
                current.append(line.strip())
    return trees


def test_every_page_is_in_the_index_toctrees_exactly_once():
    pages = sorted(p.stem for p in DOCS.glob("*.rst") if p.stem != "index")
    counts = {p: 0 for p in pages}
    for tree in _toctree_entries((DOCS / "index.rst").read_text()):
        for entry in tree:
            for page in fnmatch.filter(pages, entry):   # a glob, or a plain name that matches itself
                counts[page] += 1
    assert {p: n for p, n in counts.items() if n != 1} == {}
