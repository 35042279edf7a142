"""The readers' glossary: each name a report shows, with its one-line meaning (``term``):
the reports' legends under each table and their HTML hover text."""
from __future__ import annotations

GLOSSARY: dict[str, str] = {}  # name -> its meaning for a reader, one line (``term``)


def term(name: str, meaning: str) -> str:
    """``name``, entered in ``GLOSSARY`` with ``meaning`` (what a report's reader needs)."""
    GLOSSARY[name] = meaning
    return name
