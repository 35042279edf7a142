"""Sweeps: a TOML grid of runs (``plan``), run and resumed point by point (``run``), summed up
in a table, plots and report.html (``report``, ``plots``)."""
