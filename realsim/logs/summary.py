"""Human-readable summary of a log file (what ``realsim logs FILE`` prints)."""

from __future__ import annotations

import math
import os

import numpy as np

from realsim.logs.reader import LogReader


def _rate(t: np.ndarray) -> float:
    """Mean rate in Hz over the stream's span; NaN with fewer than 2 samples."""
    if len(t) < 2 or t[-1] <= t[0]:
        return math.nan
    return (len(t) - 1) / float(t[-1] - t[0])


def _gap(t: np.ndarray) -> float:
    """Largest interval between consecutive samples (s); NaN with < 2 samples."""
    return float(np.max(np.diff(t))) if len(t) >= 2 else math.nan


def _f(x: float, fmt: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def summarize(path: str | os.PathLike[str]) -> str:
    """Header, one block per episode, a totals line and a completeness verdict."""
    with LogReader(path) as r:
        a = r.attrs
        lines = [
            f"{r.path}: realsim-log v{a.get('format_version')}  robot={r.robot}  source={r.source}",
            f"  created {a.get('created', '?')}  software {a.get('software', '?')}",
        ]
        extra = {k: v for k, v in a.items()
                 if k not in ("format", "format_version", "robot", "source", "created", "software")}
        if extra:
            lines.append("  " + "  ".join(f"{k}={v}" for k, v in sorted(extra.items())))
        tot_dur = 0.0
        tot_cmd = tot_sens = tot_frames = 0
        n_complete = 0
        incomplete: list[str] = []
        for ep in r.episodes():
            c, s = ep.command, ep.sensors
            tot_dur += ep.duration
            tot_cmd += len(c)
            tot_sens += len(s)
            if ep.complete:
                n_complete += 1
            else:
                incomplete.append(ep.name)
            lines.append(
                f"{ep.name}  complete={'yes' if ep.complete else 'NO'}  driver={ep.driver or '-'}"
                f"  seed={ep.seed}  duration={ep.duration:.2f} s")
            lines.append(
                f"    commands {len(c)} @ {_f(_rate(c.t))} Hz (max gap {_f(_gap(c.t), '.3f')} s)"
                f"   sensors {len(s)} @ {_f(_rate(s.t))} Hz (max gap {_f(_gap(s.t), '.3f')} s)")
            for cam, cs in sorted(ep.cameras.items()):
                tot_frames += len(cs)
                lines.append(f"    camera {cam}: {len(cs)} frames @ {_f(_rate(cs.t))} fps"
                             f" (max gap {_f(_gap(cs.t), '.3f')} s)")
            notes = []
            for k in ("dropped_lines", "watchdog_trips"):
                if k in ep.attrs:
                    notes.append(f"{k}={ep.attrs[k]}")
            notes.append(f"success={ep.success}")
            notes.append(f"score={_f(ep.score, '.3f')}")
            if ep.judge is not None:
                notes.append("judge=" + ",".join(f"{k}={v}" for k, v in sorted(ep.judge.items())))
            lines.append("    " + "  ".join(notes))
        lines.append(
            f"total: {len(r)} episodes ({n_complete} complete), {tot_dur:.1f} s, "
            f"{tot_cmd} commands, {tot_sens} sensor samples, {tot_frames} frames")
        if not incomplete:
            lines.append("verdict: all episodes complete")
        else:
            lines.append(f"verdict: {len(incomplete)} incomplete episode(s) "
                         f"(writer killed or still recording): {', '.join(incomplete)}")
    return "\n".join(lines)
