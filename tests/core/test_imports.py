import subprocess
import sys

HEAVY = ["torch", "tensorflow", "keras", "numba", "highspy", "mip", "gurobipy", "matplotlib", "dask", "distributed"]


def test_importing_remat_core_loads_no_heavy_module():
    code = (
        "import sys, remat_core, remat_core.zoo, remat_core.solvers, remat_core.plan;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"remat_core imported heavy modules: {out}"
