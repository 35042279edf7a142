"""An MoE's routed matmuls as ``harness explain`` prints them under the collectives
(``harness.runs.explained`` renders them): the table (``harness.explain.routed``, columns
``schema.ROUTED``), its title and what each form means."""
from __future__ import annotations

import pandas as pd

from harness import schema
from harness.explain.routed import FORMS

# the columns a reader sees (json and csv: every one of schema.ROUTED)
SHOWN = tuple(c for c in schema.ROUTED if c != schema.SOURCE_OP)


def table(module) -> pd.DataFrame | None:
    """The routed matmuls of a parsed module (None for no module, or none in it)."""
    from harness.explain.routed import routed_matmuls

    found = routed_matmuls(module) if module is not None else None
    return found if found is not None and len(found) else None


def title(routed: pd.DataFrame) -> str:
    n = len(routed)
    return (f"{n} routed matmul{'s' * (n != 1)}: FLOPs per step as computed, and the routed "
            f"tokens' (book §5.4: 2·T·k·D·F an expert matmul)")


def shown(routed: pd.DataFrame) -> pd.DataFrame:
    """The columns a reader sees."""
    return routed[[c for c in SHOWN if c in routed.columns]]


def forms(routed: pd.DataFrame, bullet: str = "") -> str:
    """One line per form among the rows: what it means."""
    return "".join(f"{bullet}{f}: {FORMS[f]}\n" for f in dict.fromkeys(routed[schema.FORM])
                   if f in FORMS)
