"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local():
    """A real local Ray instance on 2 CPUs for one test module (skipped without Ray)."""
    ray = pytest.importorskip("ray", reason="Ray not installed: pip install 'ldp-audit[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
