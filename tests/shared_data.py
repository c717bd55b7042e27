"""Where the shared recordings live (``../shared/data/dtr_dags`` beside the checkout), for the tests that read
them. A module of its own, not ``conftest``: ``tests/tf/conftest.py`` is another module named ``conftest``."""

import os

SHARED_DATA = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "dtr_dags"))
