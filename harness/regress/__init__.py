"""Baseline against candidate (``harness compare``, the pytest plugin's ``--harness-compare``).

Takes saved Runs (a run, a sweep, any directory of runs); gives which runs to compare
(``pairs``), what changed between two (``changes``: the program, the step, each op in the
book's terms), two layouts of one model side by side (``side_by_side``) and one verdict per pair
with its cause first (``judge``: the figures gathered, ``evidence``; one rule per cause; the line
that says it, ``lines``). Over the nights a job keeps (``harness history``): each
point's series (``history``), its change points (``changepoints``: E-divisive means), their
commit ranges and causes and the newest night's verdict (``trend``), the outputs
(``history_report``, ``history_plots``).
"""
