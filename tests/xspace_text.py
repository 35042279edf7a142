"""Build small XSpace text protos for tests: planes of lines of (name, start_ns, dur_ns, stats).

Serialized with ``jax.profiler.ProfileData.text_proto_to_serialized_xspace`` so that the bytes
come from the profiler's own proto library, not from the code under test.
"""
from __future__ import annotations


def _stat(ids: dict, name: str, value) -> str:
    sid = ids.setdefault(name, len(ids) + 1)
    if isinstance(value, str):
        return f'stats {{ metadata_id: {sid} str_value: "{value}" }}'
    if isinstance(value, float):
        return f"stats {{ metadata_id: {sid} double_value: {value!r} }}"
    return f"stats {{ metadata_id: {sid} int64_value: {int(value)} }}"


def plane(name: str, lines: dict[str, list[tuple]], plane_id: int = 1,
          stats_of_plane: dict | None = None) -> str:
    """``lines``: line name -> [(event name, start_ns, duration_ns, {stat: value}), ...];
    ``stats_of_plane``: the plane's own stats, {stat: value} (a float is a double_value)."""
    events: dict[str, int] = {}
    stats: dict[str, int] = {}
    body = [_stat(stats, k, v) for k, v in (stats_of_plane or {}).items()]
    for i, (line_name, evs) in enumerate(lines.items()):
        parts = [f'id: {i + 1} name: "{line_name}" timestamp_ns: 0']
        for ev_name, start_ns, dur_ns, ev_stats in evs:
            mid = events.setdefault(ev_name, len(events) + 1)
            st = " ".join(_stat(stats, k, v) for k, v in (ev_stats or {}).items())
            parts.append(f"events {{ metadata_id: {mid} offset_ps: {start_ns * 1000} "
                         f"duration_ps: {dur_ns * 1000} {st} }}")
        body.append("lines { " + " ".join(parts) + " }")
    body += [f'event_metadata {{ key: {v} value {{ id: {v} name: "{k}" }} }}'
             for k, v in events.items()]
    body += [f'stat_metadata {{ key: {v} value {{ id: {v} name: "{k}" }} }}'
             for k, v in stats.items()]
    return f'planes {{ id: {plane_id} name: "{name}" ' + " ".join(body) + " }"


def serialize(*planes: str) -> bytes:
    from jax.profiler import ProfileData

    return ProfileData.text_proto_to_serialized_xspace("\n".join(planes))
