"""Shared pytest configuration: deterministic hypothesis runs, no deadlines (CI machines are busy)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "nanoir",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("thorough", parent=settings.get_profile("nanoir"), max_examples=2000)
settings.load_profile(os.environ.get("NANOIR_HYPOTHESIS_PROFILE", "nanoir"))
