"""Column names of the tables that flow between stages: the one source of truth.

Units live in the names: ``_s`` seconds, ``_ns`` raw trace times, ``_bytes`` bytes, ``_GBps``
1e9 bytes/s; ``FRACTIONS`` are shown as percentages, ``RATIOS`` as multiples.
Every stage imports the constants from here; no other module spells a column as a string.
A name a report shows is made with ``term``, which enters its one-line meaning for readers in
``GLOSSARY``: the reports' legends under each table and their HTML hover text.

One module per family of tables, each name defined once there and re-exported here, so that
``from harness import schema; schema.OPS`` names every one: ``ops`` (EVENTS and OPS: identifiers,
measured, predicted and compared columns, categories), ``step`` (the step as a whole: timeline,
step object, simulated step), ``summary`` (a run's and a sweep's summary figures), ``compare``
(baseline vs candidate, two layouts side by side), ``collectives`` (every collective explained),
``plan`` (candidate layouts, the book's gap), ``serving`` (the frontier, serving layouts),
``memory`` (the three peaks, the buffers at the peak), ``routed`` (an MoE's routed matmuls),
``meta`` (a run's meta.json keys) and
``glossary`` (``term`` and ``GLOSSARY``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.errors import HarnessError
from harness.schema.collectives import *  # noqa: F403
from harness.schema.compare import *  # noqa: F403
from harness.schema.glossary import *  # noqa: F403
from harness.schema.memory import *  # noqa: F403
from harness.schema.meta import *  # noqa: F403
from harness.schema.ops import *  # noqa: F403
from harness.schema.plan import *  # noqa: F403
from harness.schema.routed import *  # noqa: F403
from harness.schema.routing import *  # noqa: F403
from harness.schema.serving import *  # noqa: F403
from harness.schema.step import *  # noqa: F403
from harness.schema.summary import *  # noqa: F403

if TYPE_CHECKING:  # pandas is imported where a table is made: harness trace starts without it
    import pandas as pd


class SchemaError(HarnessError):
    """A table handed to a stage lacks columns that stage needs."""


def validate(df: pd.DataFrame, columns: Sequence[str], *, where: str = "table") -> pd.DataFrame:
    """``df`` unchanged if it has every column in ``columns``; SchemaError otherwise."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{where}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SchemaError(f"{where}: missing columns {missing}; has {list(df.columns)}")
    return df


def empty(columns: Sequence[str]) -> pd.DataFrame:
    """An empty frame with the given columns."""
    import pandas as pd

    return pd.DataFrame({c: [] for c in columns})
