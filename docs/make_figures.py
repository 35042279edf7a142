"""The pictures README.md and docs/step.md show, drawn from the traces the tests ship.

    python docs/make_figures.py           # rewrites docs/roofline.png and docs/step.png
    python docs/make_figures.py DIR       # writes them under DIR instead

Each is the plot a report of that trace carries (``harness.report.drawn.plots``, as
``harness trace --html`` embeds it): the README's roofline of the H100 llama_train step (preset
100m), and step.md's timeline of the TPU v6e inference step.
"""
import sys
from pathlib import Path

import harness
from harness.report import drawn
from harness.report.plots import ROOFLINE_PNG
from harness.report.step_plot import STEP_PNG

ROOT = Path(__file__).resolve().parent.parent
# picture -> (the trace it is drawn from, the chip it is predicted for; None: the trace's own)
FIGURES = {
    ROOFLINE_PNG: ("tests/fixtures/h100/llama_train-100m", "h100"),
    STEP_PNG: ("tests/fixtures/external/tpu-v6e-inference", None),
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (trace, chip) in FIGURES.items():
        run = harness.analyze_trace(ROOT / trace, chip=chip)
        (out / name).write_bytes(drawn.plots(run)[name])
        print(out / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs")
