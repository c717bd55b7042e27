import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/strategies.py, tests/canonical.py, tests/oracle.py

settings.register_profile(
    "default", deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=500,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

from shared_data import SHARED_DATA  # noqa: E402,F401  (kept here for older imports)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run where a CUDA device is present and are skipped elsewhere (CI has none)."""
    import pytest

    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    try:
        import torch

        have = torch.cuda.is_available()
    except ImportError:
        have = False
    if have:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none available)")
    for item in marked:
        item.add_marker(skip)
