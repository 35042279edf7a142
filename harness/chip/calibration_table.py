"""``harness calibrate``'s report of a calibration: per measured figure, one device alone
against all N busy, with units; and what the ``cpu`` chip takes from it, with the caveat about
devices that share the host's cores."""
from __future__ import annotations

from harness.analysis.gaps import ROOFLINE_MARGIN
from harness.chip import calibration as cal_lib
from harness.units import fmt_bytes, fmt_seconds, fmt_si


def _rate(x: float | None, unit: str) -> str:
    """A measured rate with an SI prefix; "-" where none was measured."""
    return fmt_si(x, unit) if x else "-"


def _time(x: float | None) -> str:
    """A measured time; "-" where none was measured."""
    return fmt_seconds(x) if x else "-"


def rows(cal: cal_lib.Calibration) -> list[tuple[str, str, str]]:
    """(figure, one device alone, all N busy) per measured figure, with units."""
    one, all_ = cal.one, cal.all
    out = []
    for dt in cal_lib.DTYPES:
        out.append((f"matmul {dt} (best kernel)", _rate(one.flops_per_s.get(dt), "FLOP/s"),
                    _rate(all_.flops_per_s.get(dt), "FLOP/s")))
        out.append((f"  (step wall clock, {dt})", _rate(one.flops_per_s_wall.get(dt), "FLOP/s"),
                    _rate(all_.flops_per_s_wall.get(dt), "FLOP/s")))
    out += _kernels(one, all_)
    out.append(("memory stream (x*a+b)", _rate(one.memory_bytes_per_s, "B/s"),
                _rate(all_.memory_bytes_per_s, "B/s")))
    out.append(("  (step wall clock)", _rate(one.memory_bytes_per_s_wall, "B/s"),
                _rate(all_.memory_bytes_per_s_wall, "B/s")))
    out += _tiers(one, all_)
    out.append(("bf16 -> f32 convert", _rate(one.convert_bytes_per_s, "B/s"),
                _rate(all_.convert_bytes_per_s, "B/s")))
    out.append(("per-op overhead (a tiny op)", _time(one.op_overhead_s),
                _time(all_.op_overhead_s)))
    for kind in cal_lib.RING:
        out.append((f"{kind} bandwidth W", _rate(one.collective_bytes_per_s.get(kind), "B/s"),
                    _rate(all_.collective_bytes_per_s.get(kind), "B/s")))
        out.append((f"{kind} latency per hop", _time(one.collective_latency_s.get(kind)),
                    _time(all_.collective_latency_s.get(kind))))
    return out


def _kernels(one, all_) -> list[tuple[str, str, str]]:
    """A row per matmul kernel (as XLA:CPU compiled the probes), dtype and size."""
    out = []
    for key, pts in all_.kernel_flops_per_s.items():
        alone = dict(map(tuple, one.kernel_flops_per_s.get(key, [])))
        out += [(f"  {key}, {fmt_si(size, 'FLOP')} per op", _rate(alone.get(size), "FLOP/s"),
                 _rate(rate, "FLOP/s")) for size, rate in pts]
    return out


def _tiers(one, all_) -> list[tuple[str, str, str]]:
    """A row per memory tier: the bandwidth of ops moving up to its bytes."""
    return [(f"  ops moving <= {fmt_bytes(size, 0)}", "-", _rate(rate, "B/s"))
            for size, rate in all_.memory_tiers]


def title(cal: cal_lib.Calibration) -> str:
    """The table's title: the host, its cores, the devices and the calibration's mode."""
    return (f"{cal.cpu_model}, {cal.cores} cores, {cal.device_count} virtual devices "
            f"({cal.mode} calibration, {cal.seconds:.1f} s)")


def headers(cal: cal_lib.Calibration) -> tuple[str, str, str]:
    """The headers of the columns of ``rows``."""
    n = cal.device_count
    return ("per device", "one device alone" if n > 1 else "one device",
            f"all {n} busy (collectives: group of {cal.all.group})" if n > 1 else "-")


def notes(cal: cal_lib.Calibration, chip) -> list[str]:
    """The lines under the table: what its columns measure, the ``cpu`` chip ``chip`` the
    all-busy column makes, and the caveat about shared cores."""
    n = cal.device_count
    return ["Per-op times from the XLA profiler; the wall-clock rows divide by the whole step's "
            "span instead. One device alone: collectives over a pair, the other devices idle.",
            f"The `cpu` chip takes the all-{n}-busy column: "
            f"{_rate(chip.flops_per_s('fp32'), 'FLOP/s')} fp32, "
            f"{_rate(chip.flops_per_s('bf16'), 'FLOP/s')} bf16, "
            f"{_rate(chip.hbm_bytes_per_s, 'B/s')} main memory "
            f"({len(chip.memory_tiers)} cache tiers above it), "
            f"ring W {_rate(chip.ici_bytes_per_s, 'B/s')}, "
            f"{_time(chip.hop_latency_s)} per hop. A matmul is priced at its own kernel's rate "
            f"for its size (interpolated between the sizes above; "
            f"{', '.join(dict.fromkeys(k for k, _, _ in chip.kernel_flops)) or 'none'}), one "
            f"of any other kernel at the best kernel's rate.",
            *([_spread(cal)] if cal.core_speed else []),
            f"Caveat: {cal_lib.NOTE.format(n=n, cores=cal.cores)}. Treat collective predictions "
            f"on CPU as a check of the pipeline, not of an interconnect."]


def _spread(cal: cal_lib.Calibration) -> str:
    """The line on the cores' speed beside the matmul probes: its range, the probes run again
    for the faster spell, and the spread the figures carry (``harness.chip.spells``)."""
    again = (f"; {cal.repeats} probe run(s) repeated for the faster spell" if cal.repeats
             else "")
    within = (f" Figures priced from this calibration carry that spread: an efficiency above "
              f"{ROOFLINE_MARGIN:.0%} of the roofline and up to {cal.core_spread:.0%} is shown "
              f"as within the host's spread (~), not as beating it."
              if cal.core_spread > ROOFLINE_MARGIN else "")
    return (f"The cores ran the reference matmul at {_rate(cal.core_speed[0], 'FLOP')} to "
            f"{_rate(cal.core_speed[1], 'FLOP')} per CPU second beside the matmul probes "
            f"({cal.core_spread:.2f}x{again}).{within}")
