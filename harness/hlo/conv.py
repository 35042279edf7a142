"""Convolution windows: how many kernel positions meet input data per output element.

The TPU compiler prints batched and some contracted matmuls as ``convolution`` ops whose spatial
dimensions carry a batch dimension (``window={size=4 stride=3 lhs_dilate=4}``: each output
position meets one kernel position, the rest fall in dilation holes) or a contraction
(``window={size=4}`` over an input of 4: four positions per output). Counting every window
position would multiply such a matmul's FLOPs by the window size; XLA's ``HloCostAnalysis``
counts only the (output, kernel) position pairs that land on input data, and so does this.
"""
from __future__ import annotations

import numpy as np

from predictions.rules import OpDesc, Shape

_DENSE_LIMIT = 1 << 22  # output x kernel positions evaluated as one array below this


def _valid_pairs(n_in: int, k: int, o: int, stride: int, pad_lo: int, lhs_dilate: int,
                 rhs_dilate: int) -> int:
    """(output, kernel) position pairs of one spatial dim whose input position is real data:
    p = x*stride + j*rhs_dilate - pad_lo must fall on the dilated input, 0 <= p <= (n-1)*d and
    p % d == 0 (positions between dilated elements and in the padding are zeros)."""
    j = np.arange(k, dtype=np.int64) * rhs_dilate - pad_lo
    top = (n_in - 1) * lhs_dilate

    def count(x: np.ndarray) -> int:
        p = x[:, None] * stride + j[None, :]
        return int(((p >= 0) & (p <= top) & (p % lhs_dilate == 0)).sum())

    xs = np.arange(o, dtype=np.int64)
    step = max(1, _DENSE_LIMIT // max(k, 1))
    return sum(count(xs[i:i + step]) for i in range(0, o, step))


def window_positions(window: dict, labels: tuple[str, str, str], lhs: tuple[int, ...],
                     rhs: tuple[int, ...], out: tuple[int, ...]) -> float:
    """Kernel window positions per output element that meet input data, averaged over the
    output's spatial positions and multiplied over the spatial dims (1.0 with none)."""
    lhs_l, rhs_l, out_l = labels
    spatial = sorted(c for c in rhs_l if c.isdigit())
    total = 1.0
    for d, c in enumerate(spatial):
        if c not in lhs_l or c not in out_l:
            continue
        n_in, k, o = lhs[lhs_l.index(c)], rhs[rhs_l.index(c)], out[out_l.index(c)]

        def get(key: str, default: int, d=d) -> int:
            values = window.get(key) or ()
            return int(values[d]) if d < len(values) else default

        pads = window.get("pad") or ()
        pad_lo = int(pads[d][0]) if d < len(pads) else 0
        pairs = _valid_pairs(n_in, k, o, get("stride", 1), pad_lo, get("lhs_dilate", 1),
                             get("rhs_dilate", 1))
        total *= pairs / o if o else 0.0
    return total


def describe(opcode: str, results: tuple[Shape, ...], operands: tuple[Shape, ...],
             labels: tuple[str, str, str], window: dict, lhs: Shape, rhs: Shape,
             out: Shape) -> OpDesc:
    """A convolution as a dot over its kernel: each output element contracts the kernel's input
    features (``rhs_contracting``: the ``i`` of the kernel's labels) and the window positions
    that meet input data (``window_positions``). ``lhs``, ``rhs``, ``out`` are the forward
    convolution's input, kernel and output, wherever the call holds them
    (``predictions.rules.CONV_VIEWS``)."""
    lhs_l, rhs_l, _ = labels
    return OpDesc(opcode, results, operands,
                  lhs_contracting=tuple(i for i, c in enumerate(lhs_l) if c == "f"),
                  rhs_contracting=tuple(i for i, c in enumerate(rhs_l) if c == "i"),
                  window_positions=window_positions(window, labels, lhs.dims, rhs.dims,
                                                    out.dims))
