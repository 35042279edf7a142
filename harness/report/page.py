"""The HTML every report page is made of (a run's report.html, a sweep's): one style, a heading
that says what ran, tables whose headers carry their unit and, as hover text, their meaning
(``schema.GLOSSARY``), with a short legend under each, and figures. A page loads nothing from
the network: styles are inline and a run's plots are embedded as data URIs."""
from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence

import pandas as pd

from harness import schema
from harness.report import tables

# fits 1024 px: numbers never wrap, text cells and headers do (at spaces)
STYLE = ("body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em 1.5em;"
         "max-width:1200px;color:#222;line-height:1.35}"
         "h1{font-size:22px;margin:.3em 0}h2{font-size:18px;margin:1.2em 0 .4em}"
         ".meta{color:#555;font-size:13px;margin:.15em 0}"
         ".headline{font-size:15px;margin:.35em 0}.headline.first{font-size:17px;font-weight:600}"
         "table{border-collapse:collapse;font-size:13px;margin:.4em 0}"
         "td,th{border:1px solid #ddd;padding:3px 4px;text-align:right;white-space:nowrap}"
         "th{background:#f4f4f4;vertical-align:bottom;white-space:normal;font-weight:600}"
         "th[title]{cursor:help}td.text,th.text{text-align:left}"
         "td.text{white-space:normal;overflow-wrap:break-word;max-width:24em}"
         "td.flag{background:#fde4e4;color:#a00;font-weight:600}"
         ".legend{font-size:12px;color:#555;margin:.2em 0 1em;max-width:75em}"
         ".note{color:#8a5a00}.fail{color:#a00}"
         "img{max-width:100%;height:auto}figure{margin:.8em 0}")


def esc(text) -> str:
    return html.escape(str(text))


def document(title: str, body: Sequence[str]) -> str:
    """A whole page: ``body`` is a list of HTML fragments."""
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


def heading(title: str, meta_lines: Sequence[str] = (), headline: Sequence[str] = ()) -> str:
    """The title, the lines saying where and when it ran, then the headline figures (the first
    in bold)."""
    out = [f"<h1>{esc(title)}</h1>"]
    out += [f"<p class=meta>{esc(line)}</p>" for line in meta_lines if line]
    out += [f"<p class='headline{' first' if i == 0 else ''}'>{esc(line)}</p>"
            for i, line in enumerate(headline)]
    return "".join(out)


def _text_column(df: pd.DataFrame, name: str) -> bool:
    return not pd.api.types.is_numeric_dtype(df[name])


def _th(c: tables.Column, text: bool) -> str:
    meaning = schema.GLOSSARY.get(c.name)
    attrs = (" class=text" if text else "") + (f' title="{esc(meaning)}"' if meaning else "")
    # a header may break after an underscore (matmul_<wbr>efficiency) as well as at spaces
    return f"<th{attrs}>{esc(c.label).replace('_', '_<wbr>')}</th>"


def table(df: pd.DataFrame, columns: Sequence[str] | None = None, *,
          links: Mapping[int, str] | None = None, flag_reason: str = "",
          legend: bool = True, spread: float = math.nan) -> str:
    """``df`` (its ``columns`` present) as a table with unit headers and hover meanings, and
    its legend under it. ``links``: row position -> href for the first column's cell.
    ``flag_reason``: hover text of a figure above what the roofline allows; ``spread``: the
    chip's (``tables.mark``)."""
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    df = tables.shown(df)
    cols, rows = tables.cells(df, spread)
    text = [_text_column(df, c.name) for c in cols]
    head = "".join(_th(c, t) for c, t in zip(cols, text))
    body, any_flag = [], False
    for i, (row, raw) in enumerate(zip(rows, df.itertuples(index=False))):
        tds = []
        for j, (c, cell, value) in enumerate(zip(cols, row, raw)):
            inner = esc(cell)
            if j == 0 and links and links.get(i):
                inner = f'<a href="{esc(links[i])}">{inner}</a>'
            attrs = " class=text" if text[j] else ""
            if tables.flagged(c.name, value, spread):
                any_flag = True
                attrs = f' class=flag title="{esc(flag_reason or "above the roofline")}"'
            tds.append(f"<td{attrs}>{inner}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    out = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if legend:
        out += legend_html(df.columns, flags=any_flag, spread=spread)
    return out


def legend_html(names: Sequence[str], flags: bool = False, spread: float = math.nan) -> str:
    items = [f"<b>{esc(k)}</b>: {esc(v)}" for k, v in tables.legend(names)]
    if flags:
        items.append(f"<b>{tables.FLAG}</b> above what the roofline allows (see the notes)")
    if tables.within_meaning(spread):
        items.append(f"<b>{tables.WITHIN}</b> {esc(tables.within_meaning(spread))}")
    return f"<p class=legend>{' · '.join(items)}</p>" if items else ""


def image(name: str, png: bytes | None = None, width: int | None = None) -> str:
    """A figure: embedded (``png`` given: a data URI, so the page stands alone) or linked."""
    src = f"data:image/png;base64,{base64.b64encode(png).decode()}" if png is not None else name
    size = f" width={width}" if width else ""
    return f'<figure><img alt="{esc(name)}" src="{esc(src)}"{size}></figure>'


def paragraphs(lines: Sequence[str], cls: str = "") -> str:
    attr = f" class={cls}" if cls else ""
    return "".join(f"<p{attr}>{esc(line)}</p>" for line in lines)
