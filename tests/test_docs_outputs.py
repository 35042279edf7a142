"""Every output README.md and docs/*.md quote under an ``<!-- output: COMMAND -->`` marker is what
its command prints now (tests/docs_outputs.py: host figures masked, ``...`` for lines left out);
``python tests/docs_outputs.py --update`` rewrites them. The matching and the update's cuts are
checked on a made-up output too, so that a stale block cannot pass unseen."""
import sys

import docs_outputs as docs
import pytest
from docs_outputs import Block

BLOCKS = docs.all_blocks()


def test_the_pages_quote_outputs_under_markers():
    quoted = {str(b.page.relative_to(docs.ROOT)) for b in BLOCKS}
    assert {"README.md", "docs/traces.md", "docs/explain.md", "docs/regression.md",
            "docs/step.md", "docs/chips.md"} <= quoted


def test_the_commands_run_this_interpreter_with_its_packages():
    """``python`` and ``harness`` in a block are this interpreter, in its venv: a symlink to a
    venv's python starts the base interpreter, without the venv's packages (jax)."""
    out, err = docs.run('python -c "import sys; print(sys.prefix)"; '
                        'harness --help > /dev/null && echo harness-ran')
    assert out == [sys.prefix, "harness-ran"], err[-2000:]


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_a_quoted_output_is_what_its_command_prints(block):
    out, err = docs.run(block.command)
    assert out, f"{block} printed nothing:\n{err[-2000:]}"
    if not docs.matches(block, out):
        want = [docs.mask(s, "live" in block.flags) for s in block.lines
                if s.strip() != docs.GAP]
        got = [docs.mask(s, "live" in block.flags) for s in out]
        pytest.fail(f"{block} no longer prints what the page quotes "
                    f"(python tests/docs_outputs.py --update):\n"
                    + "\n".join(f"- {s}" for s in want if s not in got)
                    + "\n" + "\n".join(f"+ {s}" for s in got if s not in want)[:4000])


OUT = ["head 1.5 ms", "a", "b", "c", "legend 1", "legend 2", "note 7 ms", "trace 2026-11-23 05:13"
       " · commit 3a2d34e603"]


def _block(lines, flags=()):
    return Block(docs.ROOT / "README.md", 1, "harness x", frozenset(flags), lines)


def test_a_changed_figure_fails_and_a_masked_one_does_not():
    assert docs.matches(_block(OUT[:-1] + ["trace 2020-01-01 00:00 · commit abcdef1"]), OUT)
    assert docs.matches(_block(OUT[:-1] + ["trace 2020-01-01 00:00 · commit abcdef1 (dirty)"]),
                        OUT)
    assert not docs.matches(_block(["head 1.6 ms"] + OUT[1:]), OUT)
    assert not docs.matches(_block(OUT[:-1]), OUT)  # a line more printed than quoted


def test_a_gap_stands_for_lines_left_out_and_an_excerpt_for_the_rest():
    assert docs.matches(_block(["head 1.5 ms", "  ...", "note 7 ms", OUT[-1]]), OUT)
    assert not docs.matches(_block(["head 1.5 ms", "...", "a"]), OUT)  # "a" is not the end
    assert docs.matches(_block(["b", "c"], {"excerpt"}), OUT)
    assert not docs.matches(_block(["c", "b"], {"excerpt"}), OUT)


def test_a_live_block_compares_lines_and_columns_not_figures():
    live = _block(["head 9 ms", "a", "b", "c", "legend 1", "legend 2", "note 12.5 ms", OUT[-1]],
                  {"live"})
    assert docs.matches(live, OUT)
    assert docs.matches(_block(["head 9 us"] + OUT[1:], {"live"}), OUT)  # 1.5 ms, now 9 us
    assert not docs.matches(_block(["head 9 GB"] + OUT[1:], {"live"}), OUT)
    assert not docs.matches(_block(["tail 1.5 ms"] + OUT[1:], {"live"}), OUT)


def test_an_update_keeps_the_cuts_and_takes_the_new_lines_between():
    quoted = _block(["head 1.4 ms", "a", "b", "  ...", "legend y", "note 6 ms", OUT[-1]])
    new = ["head 1.5 ms", "a", "a2", "b", "legend x", "legend y", "note 7 ms",
           "trace 2026-11-28 06:00 · commit 0123456789"]
    # a row more before the first cut is taken; the commit and date stay as quoted
    assert docs.regenerate(quoted, new) == [
        "head 1.5 ms", "a", "a2", "b", "  ...", "legend y", "note 7 ms", OUT[-1]]
    with pytest.raises(LookupError):  # the excerpt's lines are gone
        docs.regenerate(_block(["zz 1"], {"excerpt"}), new)


def test_an_update_keeps_the_heads_length_where_its_last_line_is_gone():
    new = ["head 1.5 ms", "a", "b", "legend y", "note 7 ms"]
    quoted = _block(["head 1.4 ms", "gone", "...", "legend y", "note 6 ms"])
    assert docs.regenerate(quoted, new) == ["head 1.5 ms", "a", "...", "legend y", "note 7 ms"]
