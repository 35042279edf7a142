"""Sweeps: a TOML grid of runs (``grid``), run and resumed point by point (``run``), summed up
in a table, plots and report.html (``report``, ``plots``)."""
