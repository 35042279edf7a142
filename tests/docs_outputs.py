"""The outputs that README.md and docs/*.md quote, tied to the commands that make them.

A quoted output is the fenced block right after a marker line naming its command:

    <!-- output: harness trace tests/fixtures/h100/llama_train-100m --chip h100 --top 5 -->

The command runs in bash from a copy of the repository root (its files linked, docs/ copied, so
what it writes stays out of the checkout), ``harness`` being ``python -m harness``; the block is
its stdout.
Both are compared after ``mask``: figures that depend on the host (commit hashes, dates, the
directory it ran in) are masked, nothing else, so an output made from a fixture trace compares
exactly. A ``...`` line in a block stands for any lines the page leaves out. Flags before the
colon: ``excerpt`` (the block is a run of lines from anywhere in the output), ``live`` (the
output is measured on this host: every number is masked and spacing collapsed, so the lines and
columns are compared, not the figures).

    python tests/docs_outputs.py             # check every block; name those that differ
    python tests/docs_outputs.py --update    # rewrite the blocks from their commands' output

``--update`` keeps each block's cuts: a block's first and last lines and those beside a ``...``
are found again in the new output with their figures ignored, and what lies between is taken.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/*.md")
MARKER = re.compile(r"^<!-- output(?P<flags>(?: \w+)*): (?P<command>.+?) -->$")
FENCE = "```"
GAP = "..."
# figure -> what it is masked as, in every block
MASKS = (
    # the checkout's commit, and whether it has uncommitted changes (a trace's page names the
    # commit of the checkout that reads it)
    (re.compile(r"\bcommit [0-9a-f]{7,40}\b(?: \(dirty\))?"), "commit <commit>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T_]\d{2}[:_]?\d{2}(?:[:_]?\d{2}(?:\.\d+)?)?"
                r"(?: ?(?:[+-]\d{2}:?\d{2}|Z))?"), "<date>"),
    (re.compile(r"\b\d{8}-\d{6}\b"), "<date>"),  # a sweep's directory stamp
)
# and in a live block: op names' numbers, time units' prefixes, every number, and the
# spacing their widths set
LIVE_MASKS = (
    (re.compile(r"(?<=[A-Za-z_-])\.\d+\b"), ""),  # all-reduce.1: a run's ranking moves its rows
    (re.compile(r"\b[nuµm]s\b"), "s"),  # a time's unit moves with its size: (us) or (ms)
    (re.compile(r"[+-]?\d+(?:[.,]\d+)*(?:e[+-]?\d+)?"), "#"),
    (re.compile(r"[─━]+"), "─"),
    (re.compile(r"[ \t]+"), " "),
)
TIMEOUT_S = 600
COPIED = ("docs",)  # copied into the linked root, not linked


@dataclass
class Block:
    page: Path
    line: int  # the marker's line number, from 1
    command: str
    flags: frozenset
    lines: list  # the block's lines, between its fences

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.command}"


def pages() -> list:
    return sorted(p for pattern in PAGES for p in ROOT.glob(pattern))


def blocks(page: Path) -> list:
    text = page.read_text().splitlines()
    found = []
    for i, line in enumerate(text):
        m = MARKER.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(text) or not text[i + 1].startswith(FENCE):
            raise ValueError(f"{page}:{i + 1}: an output marker must be followed by a ``` block")
        end = next(j for j in range(i + 2, len(text)) if text[j].startswith(FENCE))
        found.append(Block(page, i + 1, m["command"], frozenset(m["flags"].split()),
                           text[i + 2:end]))
    return found


def all_blocks() -> list:
    return [b for page in pages() for b in blocks(page)]


def mask(line: str, live: bool = False) -> str:
    for pattern, to in MASKS + (LIVE_MASKS if live else ()):
        line = pattern.sub(to, line)
    return line.rstrip()


def run(command: str) -> tuple:
    """``command``'s stdout lines and stderr, run in bash from a linked copy of the root."""
    with tempfile.TemporaryDirectory(prefix="docs-output-") as tmp:
        work, bin_dir = Path(tmp) / "repo", Path(tmp) / "bin"
        work.mkdir()
        bin_dir.mkdir()
        for entry in ROOT.iterdir():
            if entry.name in COPIED:  # scripts run from here, their paths as a user sees them
                shutil.copytree(entry, work / entry.name)
            elif not entry.name.startswith(".") and entry.name != "results":
                (work / entry.name).symlink_to(entry)
        # wrappers that run this interpreter by its path: a symlink to a venv's python would
        # start the base interpreter without the venv's packages (Python finds its venv from the
        # path it was started by)
        for name, args in (("harness", "-m harness "), ("python", "")):
            (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}"$@"\n')
            (bin_dir / name).chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        out = done.stdout.replace(f"{work}/", "").replace(str(work), ".")
    return [s.rstrip() for s in out.rstrip("\n").splitlines()], done.stderr


def _segments(lines: list) -> list:
    """The block's runs of lines between its ``...`` lines."""
    runs = [[]]
    for line in lines:
        if line.strip() == GAP:
            runs.append([])
        else:
            runs[-1].append(line)
    return runs


def _at(out: list, seg: list, start: int, key) -> int:
    """The first index >= ``start`` where ``seg`` lies in ``out`` by ``key``, else -1."""
    want = [key(s) for s in seg]
    have = [key(s) for s in out]
    for i in range(start, len(out) - len(seg) + 1):
        if have[i:i + len(seg)] == want:
            return i
    return -1


def matches(block: Block, out: list) -> bool:
    """Does the block's text (masked) lie in ``out`` (masked), its gaps standing for any lines?"""
    live = "live" in block.flags
    segs = _segments(block.lines)
    key = (lambda s: mask(s, live))  # noqa: E731
    if len(segs) == 1 and "excerpt" not in block.flags:
        return [key(s) for s in out] == [key(s) for s in segs[0]]
    pos, last = 0, len(segs) - 1
    for k, seg in enumerate(segs):
        if k == 0 and "excerpt" not in block.flags:
            if [key(s) for s in out[:len(seg)]] != [key(s) for s in seg]:
                return False
            pos = len(seg)
            continue
        if k == last and "excerpt" not in block.flags:
            tail = len(out) - len(seg)
            return tail >= pos and [key(s) for s in out[tail:]] == [key(s) for s in seg]
        found = _at(out, seg, pos, key)
        if found < 0:
            return False
        pos = found + len(seg)
    return True


def _loose(line: str) -> str:
    """A line with its figures and spacing left out: what stays when only figures change."""
    return re.sub(r"[\d.,:+\-─━\s]+", "", mask(line))


def regenerate(block: Block, out: list) -> list:
    """The block's new lines: ``out`` cut where the old block was cut. A cut is found by the
    quoted line beside it, figures ignored; where that line is gone, the block's head and tail
    keep their lengths, and a run between two cuts cannot be placed (LookupError)."""
    segs = _segments(block.lines)
    gap = next((s for s in block.lines if s.strip() == GAP), GAP)
    exact = "excerpt" not in block.flags
    if len(segs) == 1 and exact:
        return _kept(block, out)
    new, pos = [], 0
    for k, seg in enumerate(segs):
        if not seg:  # the block opens or ends with its gap
            new += [gap] if k else []
            continue
        head, tail = exact and k == 0, exact and k == len(segs) - 1
        first = 0 if head else _at(out, seg[:1], pos, _loose)
        if tail:
            first, stop = (first if first >= 0 else max(pos, len(out) - len(seg))), len(out)
        else:
            end = _at(out, seg[-1:], max(first, pos), _loose) if first >= 0 else -1
            if end < 0 and head:
                end = len(seg) - 1
            if first < 0 or end < 0:
                raise LookupError(f"{block}: the quoted lines around a cut are no longer in "
                                  f"the output; quote it again by hand")
            stop = end + 1
        new += ([gap] if k else []) + out[first:stop]
        pos = stop
    return _kept(block, new)


def _kept(block: Block, new: list) -> list:
    """``new``, each line the same as a quoted one but for masked figures left as quoted (a
    commit hash, a date): an update changes only what changed."""
    old = {mask(s, "live" in block.flags): s for s in block.lines}
    return [old.get(mask(s, "live" in block.flags), s) for s in new]


def rewrite(page: Path, updates: dict) -> None:
    """Replace the blocks at ``updates``' marker lines with their new lines."""
    text = page.read_text().splitlines()
    for line in sorted(updates, reverse=True):
        end = next(j for j in range(line + 1, len(text)) if text[j].startswith(FENCE))
        text[line + 1:end] = updates[line]
    page.write_text("\n".join(text) + "\n")


def main(argv: list) -> int:
    update = "--update" in argv
    only = [a for a in argv if a != "--update"]
    stale = failed = 0
    for page in pages():
        if only and str(page.relative_to(ROOT)) not in only:
            continue
        updates = {}
        for block in blocks(page):
            out, err = run(block.command)
            if matches(block, out):
                continue
            stale += 1
            if update:
                try:
                    updates[block.line] = regenerate(block, out)
                    print(f"updated {block}")
                except LookupError as e:
                    failed += 1
                    print(e)
            else:
                print(f"differs {block}" + (f"\n{err.strip()}" if not out else ""))
        if updates:
            rewrite(page, updates)
    return 1 if failed or (stale and not update) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
