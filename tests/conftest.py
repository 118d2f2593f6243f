"""Shared pytest configuration: hypothesis profiles (deterministic by default), no deadlines (CI
machines are busy).

Profiles (``NANOIR_HYPOTHESIS_PROFILE``): ``nanoir`` (the default, 100 examples per property
test), ``thorough`` (for CI) and ``explore``. The first two are derandomized, so every run
draws the same examples; ``explore`` is not: it draws new ones each run (10x the default's
count, and the failing example's blob printed to reproduce it with ``@reproduce_failure``,
and kept in ``.hypothesis/`` to replay first next time). Run it before each submission, so
that examples CI never draws keep being tried::

    NANOIR_HYPOTHESIS_PROFILE=explore pytest -x

A test that pins its own count writes
``@settings(max_examples=examples(n))`` (``nanoir.testing.programs.examples``): ``n`` under the
default profile, scaled by ``max_examples / 100`` under another, so every property test grows
with the profile. ``thorough`` draws 1.5x the default's examples (CI: 2.5x took about 37
minutes on a 2-core machine in December 2026, over the 30 CI aims for; the property tests are
58% of the suite's time, nearly in proportion to their counts). ``explore`` is where examples are
drawn in bulk.
"""

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
settings.register_profile("thorough", parent=settings.get_profile("nanoir"), max_examples=150)
settings.register_profile(
    "explore", parent=settings.get_profile("nanoir"), derandomize=False, max_examples=1000
)
settings.load_profile(os.environ.get("NANOIR_HYPOTHESIS_PROFILE", "nanoir"))
