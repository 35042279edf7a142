"""Stage 7: runs on disk and what is done with them.

``run`` is the Run (what ran, its tables; save, load, render), ``pipeline`` the one path from a
capture (or any trace) to a Run, ``workload`` takes a registered workload from build to stored
run, ``store`` keeps run directories, ``regress`` compares a baseline with a candidate,
``pairs`` which runs to compare, ``changes`` what changed between two (in the book's terms).
"""
