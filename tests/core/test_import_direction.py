"""The core's imports run one way: graph <- schedule <- simulate <- plan <- solvers.

Each module of ``remat_core`` sits in a layer; a module may import its own
layer and the layers below, never one above, not even inside a function (a
convenience method that reaches upward belongs to the module that owns the
operation). Subpackages count as one module. The test reads imports with
``ast``, so it sees function-level and ``TYPE_CHECKING`` imports too.
"""

import ast
import functools
import pathlib

import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "remat_core"

# bottom to top; see docs/architecture.rst
LAYERS = [
    {"errors", "_native_io", "kernels", "_json"},
    {"graph"},
    {"schedule", "chain", "zoo"},
    {"simulate"},
    {"plan", "units", "formulation", "bounds", "sequence"},
    {"order"},
    {"solvers"},
    {"batch", "sweep", "plot", "cli", "__init__", "host"},
]
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _unit(module: str) -> str:
    """``remat_core.solvers.ilp`` -> ``solvers``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def _imported_modules(path: pathlib.Path, module: str) -> list[tuple[str, int]]:
    """Every ``remat_core`` module that ``path`` imports, with the line."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import kernels` imports a module; `from . import solve` an attribute of the package
            targets = [f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        found += [(t, node.lineno) for t in targets if t == "remat_core" or t.startswith("remat_core.")]
    return found


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield path, module


@functools.lru_cache(maxsize=None)
def _edges():
    return tuple((_unit(src), _unit(dst), f"{path.relative_to(ROOT.parent)}:{line} imports {dst}")
                 for path, src in _modules() for dst, line in _imported_modules(path, src))


def test_every_core_module_has_a_layer():
    units = {_unit(module) for _, module in _modules()}
    assert units <= set(LAYER_OF), f"add these modules to LAYERS: {sorted(units - set(LAYER_OF))}"


def test_no_module_imports_a_layer_above_its_own():
    upward = [where for src, dst, where in _edges() if LAYER_OF[dst] > LAYER_OF[src]]
    assert upward == []


def test_module_imports_have_no_cycle():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in _edges():
        if src != dst:
            graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def visit(u, path):
        state[u] = 1
        for v in graph.get(u, ()):
            if state.get(v) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(v):] + [v]))
            if v not in state:
                visit(v, path + [v])
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u, [u])


def test_the_checker_sees_function_level_imports(tmp_path):
    src = tmp_path / "remat_core" / "graph.py"
    src.parent.mkdir()
    src.write_text("def f():\n    from .schedule import Schedule\n")
    assert _imported_modules(src, "remat_core.graph") == [("remat_core.schedule", 2)]


ADAPTERS_AND_FRAMEWORKS = ("remat_torch", "remat_tf", "torch", "tensorflow", "keras")


def _foreign_imports(path: pathlib.Path) -> list[tuple[str, int]]:
    """Every absolute import of an adapter or a framework in ``path`` (function-level ones included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(n, node.lineno) for n in names if n.split(".")[0] in ADAPTERS_AND_FRAMEWORKS]
    return found


def test_the_core_never_imports_an_adapter_or_a_framework():
    # an adapter imports the core; the reverse (cli.py once imported remat_torch.demo) makes a cycle
    found = [f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
             for path, _ in _modules() for name, line in _foreign_imports(path)]
    assert found == []


def test_the_adapter_checker_sees_function_level_imports(tmp_path):
    src = tmp_path / "cli.py"
    src.write_text("def f():\n    from remat_torch.demo import run_demo\n    import torch.nn\n")
    assert _foreign_imports(src) == [("remat_torch.demo", 2), ("torch.nn", 3)]


def test_the_demo_command_comes_in_through_an_entry_point(monkeypatch, capsys):
    """`remat demo` is registered by remat_torch's entry point; without it, the command says what to install."""
    from remat_core import cli

    monkeypatch.setattr(cli, "_plugin_entry_points", lambda: {})
    assert cli.main(["demo", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "remat demo" in err and "pip install 'remat[torch]'" in err
    assert "demo" in cli.build_parser()._subparsers._group_actions[0].choices


def test_a_core_command_loads_no_plugin():
    code = ("import sys; from remat_core.cli import main; rc = main(['methods']);"
            "print(rc, [m for m in ('torch', 'remat_torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"
