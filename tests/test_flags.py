"""One flag per idea across every command (issue 51): each command's ``--help`` read against a
table written here by hand, the table docs/commands.md prints, the output paths every command
checks before any work, and the old spellings that still work for one release."""
from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from harness import cli

DOCS = Path(__file__).resolve().parent.parent / "docs" / "commands.md"

# flag -> what it takes, the same in every command: "switch", a metavar, or "{choices}"
FLAGS = {
    "--alpha": "P", "--allow-busy": "switch", "--B": "N", "--D": "N", "--F": "N",
    "--baseline": "WHICH", "--batch": "N", "--bytes": "BYTES", "--chip": "CHIP",
    "--command-buffers": "switch", "--compiler": "{auto,cpu,none,tpu}", "--confirm": "N",
    "--context": "N", "--coordinator": "HOST:PORT", "--csv": "FILE", "--devices": "N",
    "--devices-per-process": "N", "--distributed": "switch", "--dry-run": "switch",
    "--dtype": "DTYPE", "--fail-on": "METRIC=PCT", "--format": "{text,md,html,json,csv}",
    "--grace": "S", "--help": "switch", "--hlo": "FILE", "--hops": "N", "--host": "ADDRESS",
    "--host-change": "FRACTION", "--html": "FILE", "--init-timeout": "S", "--int4": "switch",
    "--int8": "switch", "--json": "FILE", "--junit": "FILE", "--keep-trace": "DIR",
    "--kv-bytes": "BYTES", "--layout": "LAYOUT", "--links": "N", "--list": "switch",
    "--microbatches": "N", "--repeats": "N",   # predict pipeline (issue 53)
    "--memory": "switch",   # run: the memory section (issue 56)
    # predict serve, predict speculative, plan llama_decode (issue 55)
    "--prompt": "N", "--generate": "N", "--latency": "S", "--price": "USD",
    "--acceptance": "FRACTION", "--draft-tokens": "N", "--draft-cost": "FRACTION",
    "--compile": "N",
    # predict moe (issue 54)
    "--E": "N", "--k": "N", "--L": "N", "--shared": "N", "--capacity": "FACTOR",
    "--mesh": "NAME=N,...", "--mfu": "FRACTION", "--model": "NAME",
    "--no-compile-cache": "switch", "--no-point-plots": "switch", "--noise": "SD",
    "--num-chips": "N", "--num-processes": "N", "--out": "DIR", "--point-plots": "switch",
    "--port": "N", "--preset": "NAME", "--process-id": "I", "--processes": "N",
    "--program": "NAME|ID|all", "--quick": "switch", "--repeat": "N", "--resume": "[DIR]",
    "--root": "DIR", "--save": "FILE", "--segment-s": "S", "--seq-len": "T",
    "--set": "KEY=VALUE", "--significance": "P", "--spans": "M_X[xM_Y]", "--steps": "N",
    "--strict": "switch", "--tokens": "N", "--top": "N", "--topology": "SHAPE",
    "--verbose": "switch", "--warmup": "N", "--weight-bytes": "BYTES", "--weight-dtype": "DTYPE",
    "--wraparound": "{auto,yes,no}",
    # the network past one node or slice (docs/networks.md)
    "--system": "NAME", "--sharp": "{theory,measured}", "--nodes": "N",
    "--gpus-per-node": "N", "--slices": "N", "--over": "NAME[,NAME]",
}
# the output paths: each is checked before any work (harness.commands.check_options)
OUTPUTS = {"--csv", "--json", "--html", "--junit", "--out", "--keep-trace", "--save"}
# (command argv, old spelling with its value, dest, value it sets, the new spelling named)
DEPRECATED = [
    (["trace", "t.pb"], ["--warmup-steps", "3"], "warmup", 3, "--warmup"),
    (["plan"], ["--no-cache"], "compile_cache", False, "--no-compile-cache"),
    (["predict-hlo", "matmul"], ["--no-cache"], "compile_cache", False, "--no-compile-cache"),
    (["plan"], ["--seq", "4096"], "seq", 4096, "--seq-len"),
    (["predict", "chips"], ["--json"], "format", "json", "--format json"),
    (["calibrate"], ["--json"], "format", "json", "--format json"),
    (["calibrate"], ["--out", "c.json"], "save", Path("c.json"), "--save"),
    (["predict", "collective", "all-gather", "--bytes", "1", "--chip", "h100"],
     ["--axes", "4x4"], "mesh", "4x4", "--mesh"),
    (["predict", "train", "--model", "m", "--chip", "c", "--tokens", "1"],
     ["--axes", "2x1"], "spans", "2x1", "--spans"),
    (["predict", "train", "--model", "m", "--chip", "c", "--tokens", "1"],
     ["--strategy", "tp"], "layout", "tp", "--layout"),
    (["predict", "decode", "--model", "m", "--chip", "c", "--batch", "1", "--context", "1"],
     ["--chips", "8"], "chips", "8", "--num-chips"),
    (["compare", "a", "b"], ["--host", "0.2"], "host", 0.2, "--host-change"),
]


def _subparsers(parser):
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name (``predict train`` for predict's questions), the
    top-level ``harness`` parser as ``harness``."""
    out = {}
    for name in cli.COMMANDS:
        top = cli.build_parser([name])
        out.setdefault("harness", top)
        p = _subparsers(top).choices[name]
        sub = _subparsers(p)
        if sub is None:
            out[name] = p
        for question, q in (sub.choices.items() if sub else ()):
            out[f"{name} {question}"] = q
    return out


PARSERS = parsers()


def takes(action) -> str:
    if action.nargs == 0:
        return "switch"
    if action.choices is not None:
        return "{" + ",".join(action.choices) + "}"
    return f"[{action.metavar}]" if action.nargs == "?" else str(action.metavar)


def shown(parser) -> dict[str, argparse.Action]:
    """The options ``--help`` lists: every spelling of each (deprecated ones are hidden)."""
    return {s: a for a in parser._actions if a.help != argparse.SUPPRESS
            for s in a.option_strings if s.startswith("--")}


def help_flags(parser) -> set[str]:
    """The long options ``--help`` prints, read from its text."""
    text = parser.format_help()
    return set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", text.split("options:", 1)[-1]))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_flag_of_every_command_means_what_the_table_says(name):
    parser = PARSERS[name]
    options = shown(parser)
    # what --help prints is what the parser takes (options named in help texts included)
    assert set(options) <= help_flags(parser)
    for flag, action in options.items():
        assert flag in FLAGS, f"harness {name}: {flag} is in no table (add it to docs/commands.md)"
        assert takes(action) == FLAGS[flag], (name, flag)
        if FLAGS[flag] in ("FILE", "DIR"):
            assert action.type is Path, (name, flag)


def test_every_flag_of_the_table_is_some_commands():
    used = {flag for p in PARSERS.values() for flag in shown(p)}
    assert used == set(FLAGS)


def test_one_set_of_format_choices():
    formats = {takes(shown(p)["--format"]) for p in PARSERS.values() if "--format" in shown(p)}
    assert formats == {"{text,md,html,json,csv}"}
    assert sum("--format" in shown(p) for p in PARSERS.values()) >= 16


def _docs_flags() -> set[str]:
    text = DOCS.read_text().split("## Flags", 1)[1].split("\n## ", 1)[0]
    # the first table: the flags as they are now (the second: the old spellings)
    table = next(t for t in text.split("\n\n") if t.startswith("| flag |"))
    cells = [row.split(" | ")[0] for row in table.splitlines()[2:]]
    return {f for cell in cells for f in re.findall(r"(?<![\w-])(-v|--[A-Za-z][\w-]*)", cell)}


def test_the_docs_table_lists_every_flag():
    assert _docs_flags() == (set(FLAGS) - {"--help"}) | {"-v"}


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_output_path_is_checked_before_any_work(name):
    module = importlib.import_module(cli.COMMANDS[name][0])
    checked = getattr(module, "CHECKED", {})
    parser = _subparsers(cli.build_parser([name])).choices[name]
    sub = _subparsers(parser)
    for p in [parser] + (list(sub.choices.values()) if sub else []):
        for flag, action in shown(p).items():
            if flag in OUTPUTS:
                assert checked.get(action.dest.replace("_", "-")) in ("file", "dir", "new-dir"), \
                    (name, flag)
            if flag == "--chip":
                assert checked.get(action.dest) == "chip", (name, flag)


@pytest.mark.parametrize("argv, old, dest, value, new", DEPRECATED,
                         ids=[" ".join(d[0][:1] + d[1][:1]) for d in DEPRECATED])
def test_an_old_spelling_works_for_one_release_with_one_line(capsys, argv, old, dest, value,
                                                             new):
    parser = cli.build_parser(argv)
    args = parser.parse_args([*argv, *old])
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    command = " ".join(argv[:2]) if argv[0] == "predict" else argv[0]
    assert err == f"harness {command}: {old[0]} is deprecated; use {new}\n"
    name = command if command in PARSERS else argv[0]
    # hidden from --help; the new spelling is shown (the new --axes are --mesh and --spans)
    assert old[0] not in shown(PARSERS[name])
    assert new.split()[0] in shown(PARSERS[name])


def test_a_format_a_command_does_not_write_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        cli.build_parser(["compare"]).parse_args(["compare", "a", "--format", "csv"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "harness compare writes text, md, json, not csv" in err[0]
