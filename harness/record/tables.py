"""A run's tables: what ``harness.analysis.tables.derive`` derives and a stored run keeps.

The OPS table ranked by gap, per-category sums, per-step samples, summary figures, notes, the
collectives the layout did not call for, XLA's cross-check, the PROGRAMS that ran, the step as
a whole (``schema.STEP_OBJECT``), every collective explained (``schema.COLLECTIVES``,
``harness.explain``), the step's spans measured and simulated, and ``meta``: what the run was.
A ``harness.record.Run`` is these tables and the record of what ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Tables:
    """A run's tables and figures. ``meta``: what the run was (workload, mesh, chip,
    environment, commit, timings); the analysis fills in what it found there: how ops were
    timed (``schema.OP_TIMING``) and the step program (``schema.PROGRAM``,
    ``schema.PROGRAM_ID``), where one ran."""

    ops: pd.DataFrame = field(default_factory=pd.DataFrame)
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    summary: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unexpected: pd.DataFrame | None = None  # collectives the layout did not call for
    cross_check: dict = field(default_factory=dict)  # our FLOPs/bytes against cost_analysis()
    programs: pd.DataFrame | None = None  # schema.PROGRAMS: every program that ran
    step: dict = field(default_factory=dict)  # schema.STEP_OBJECT: the step as a whole
    collectives: pd.DataFrame | None = None  # schema.COLLECTIVES: every collective explained
    step_spans: pd.DataFrame | None = None  # schema.STEP_SPANS of that step (a fresh run's)
    predicted_spans: pd.DataFrame | None = None  # the same of the simulated roofline step
    meta: dict = field(default_factory=dict)
