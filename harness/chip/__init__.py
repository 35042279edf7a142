"""Which chip a run is priced on, resolved before the analysis.

Takes a chip name, a live device or a trace's device planes; gives a
``predictions.hardware.Chip`` (``resolve``). On a CPU host that chip is measured: the programs
timed (``probes``, their sizes in each mode: ``modes``), the ``cpu`` chip they make
(``calibration``, saved under ``cache``), the probes measured again where the cores slowed and
the spread the chip carries (``spells``), and the host's drift around each run (``drift``),
which divides out of its efficiencies.
"""
