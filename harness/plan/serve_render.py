"""What ``harness plan llama_decode`` prints and writes: the ranked serving layouts and the
frontier as text or Markdown, the JSON object, and the HTML page with the latency-throughput
frontier drawn (applied-inference.md's plot: per-token latency against tokens/s per chip)."""
from __future__ import annotations

from harness import schema
from harness.plan.serve_plan import ServePlan
from harness.report import page, tables


def serve_plan_text(sp: ServePlan, fmt: str) -> str:
    """The header, notes, the ranked layouts and the frontier (``fmt``: text or md)."""
    return ("".join(f"{line}\n" for line in [sp.header, *sp.notes])
            + tables.render(sp.table, fmt) + "latency-throughput frontier:\n"
            + tables.render(sp.frontier, fmt))


def frontier_png(frontier) -> bytes:
    """Per-token latency (ms) against tokens/s per chip, one line per precision, each point
    its batch; axes labelled, the legend outside the data."""
    import io

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    fig.subplots_adjust(left=0.1, right=0.78, bottom=0.13, top=0.9)
    for name, d in frontier.groupby(schema.PRECISION, sort=False):
        x, y = d[schema.SERVE_STEP_S] * 1e3, d[schema.TOKENS_PER_S_PER_CHIP]
        ax.plot(x, y, marker="o", label=f"{name} on {d[schema.NUM_CHIPS].iloc[0]} chips")
        for b, xi, yi in zip(d[schema.BATCH], x, y):
            ax.annotate(f"B={b}", (xi, yi), textcoords="offset points", xytext=(4, -10),
                        fontsize=7)
    ax.set_xlabel("per-token latency, one decode step (ms)")
    ax.set_ylabel("generated tokens/s per chip")
    ax.set_title("latency-throughput frontier (applied-inference.md)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def serve_plan_html(sp: ServePlan) -> str:
    """The whole page: heading, the frontier plot, the ranked layouts, the frontier table."""
    body = [page.heading("serving plan", [sp.header, *sp.notes]),
            page.image("frontier.png", frontier_png(sp.frontier)),
            "<h2>serving layouts, ranked</h2>", page.table(sp.table),
            "<h2>latency-throughput frontier</h2>", page.table(sp.frontier)]
    return page.document("serving plan", body)
