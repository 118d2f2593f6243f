"""The ``xdsl.universe`` entry point: plain ``xdsl-opt`` sees the nanoir dialects and passes.

Only what nanoir defines is listed here; builtin, func and arith already come with xDSL.
"""

from __future__ import annotations

from xdsl.universe import Universe

from nanoir.context import NANOIR_DIALECTS
from nanoir.passes import NANOIR_PASSES

NANOIR_UNIVERSE = Universe(all_dialects=dict(NANOIR_DIALECTS), all_passes=dict(NANOIR_PASSES))
