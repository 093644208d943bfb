"""Look at a log before trusting it: one episode's signals against time and its cameras.

:func:`render_episode` draws every sensor field (one panel each, every column a
line, on the sensors' own timestamps) and the commanded action (a step plot, as
the robot held it), then a strip of camera frames evenly spread over the episode.
``compare`` overlays the same episode of another log (a ``realsim replay``
output), dashed. The PNG is drawn with matplotlib's Agg canvas (no display
needed); an ``.html`` output is a self-contained page with the PNG inlined and
the episode's attributes listed.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.interop.table import SKIP_FIELDS

ARM_JOINTS = ("pan", "lift", "elbow", "wflex", "roll", "grip")
MAX_FRAMES = 8


def _pick(reader: Any, key: str | int, privileged: bool = False) -> Any:
    """Episode ``key`` (index, negative index or ``ep_...`` name) of an open LogReader."""
    if isinstance(key, str) and key.lstrip("-").isdigit():
        key = int(key)
    if isinstance(key, int) and key < 0:
        key += len(reader)
    return reader.episode(key, privileged=privileged)


def _labels(robot: str, field: str, width: int) -> list[str]:
    if width == 1:
        return [field]
    if robot == "arm" and width == 6:
        return [f"{field}.{j}" for j in ARM_JOINTS]
    if width == 2:
        return [f"{field}.x", f"{field}.y"]
    return [f"{field}[{i}]" for i in range(width)]


def _signals(ep: Any) -> list[str]:
    """Plottable sensor fields: the robots' fields in their documented order, then the rest."""
    first = ("qpos", "qvel", "load", "voltage", "temperature", "enc_rad", "yaw_rate", "accel", "vbat")
    have = [k for k, v in ep.sensors.fields.items()
            if k not in SKIP_FIELDS and np.asarray(v).dtype.kind in "biuf"]
    return [k for k in first if k in have] + sorted(k for k in have if k not in first)


def render_png(path: str | Path, episode: str | int = 0, compare: str | Path | None = None,
               max_frames: int = MAX_FRAMES) -> tuple[bytes, dict[str, Any]]:
    """PNG bytes of one episode's plot, and a description of what it shows."""
    from matplotlib.figure import Figure

    from realsim.logs import LogReader

    with LogReader(path) as r:
        ep = _pick(r, episode)
        robot = r.robot
        other = None
        if compare is not None:
            with LogReader(compare) as rc:
                if rc.robot != robot:
                    raise UserError(f"{compare}: a log of {rc.robot}, not {robot} like {path}")
                key: str | int = ep.name if ep.name in rc.episode_names else r.episode_names.index(ep.name)
                if isinstance(key, int) and key >= len(rc):
                    raise UserError(f"{compare}: no episode {ep.name} (and only {len(rc)} episodes)")
                other = _pick(rc, key)
        fields = _signals(ep)
        cams = {c: cs for c, cs in ep.cameras.items() if len(cs)}
        n_sig = len(fields) + (1 if len(ep.command) else 0)
        if n_sig == 0 and not cams:
            raise UserError(f"{path}: episode {ep.name} is empty (no sensors, commands or frames)")
        ncol = max(min(max_frames, max((len(c) for c in cams.values()), default=1)), 1)
        fig = Figure(figsize=(13, 2.0 * n_sig + 1.9 * len(cams) + 0.6), dpi=90)
        gs = fig.add_gridspec(max(n_sig + len(cams), 1), ncol,
                              height_ratios=[2.0] * n_sig + [1.9] * len(cams))
        axes = []
        for i, k in enumerate(fields):
            ax = fig.add_subplot(gs[i, :], sharex=axes[0] if axes else None)
            axes.append(ax)
            v = np.asarray(ep.sensors[k], float).reshape(len(ep.sensors), -1)
            labels = _labels(robot, k, v.shape[1])
            for j in range(v.shape[1]):
                (line,) = ax.plot(ep.sensors.t, v[:, j], lw=1.0, label=labels[j])
                if other is not None and k in other.sensors:
                    w = np.asarray(other.sensors[k], float).reshape(len(other.sensors), -1)
                    if j < w.shape[1]:
                        ax.plot(other.sensors.t, w[:, j], lw=1.0, ls="--", color=line.get_color(),
                                label="replay" if j == 0 else None)
            ax.set_ylabel(k)
            ax.legend(loc="upper right", fontsize=7, ncol=min(v.shape[1] + 1, 7))
            ax.grid(alpha=0.3)
        if len(ep.command):
            ax = fig.add_subplot(gs[len(fields), :], sharex=axes[0] if axes else None)
            axes.append(ax)
            a = np.asarray(ep.command["action"], float).reshape(len(ep.command), -1)
            names = (["steer", "throttle"] if robot == "rc_car" and a.shape[1] == 2
                     else _labels(robot, "action", a.shape[1]))
            for j in range(a.shape[1]):
                ax.step(ep.command.t, a[:, j], where="post", lw=1.0, label=names[j])
            ax.set_ylabel("command")
            ax.legend(loc="upper right", fontsize=7, ncol=min(a.shape[1], 7))
            ax.grid(alpha=0.3)
        if axes:
            axes[-1].set_xlabel("time since episode start (s)")
        for ci, (cam, cs) in enumerate(sorted(cams.items())):
            idx = np.unique(np.linspace(0, len(cs) - 1, min(ncol, len(cs))).astype(int))
            for col, i in enumerate(idx):
                ax = fig.add_subplot(gs[n_sig + ci, col])
                try:
                    ax.imshow(cs.decode(int(i)))
                except ValueError:
                    ax.text(0.5, 0.5, "undecodable", ha="center", va="center")
                ax.set_title(f"{cam} t={cs.t[i]:.2f}s", fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
        verdict = {1: "success", 0: "failure"}.get(ep.success, "unknown")
        score = "" if math.isnan(ep.score) else f", score {ep.score:.3g}"
        title = (f"{Path(path).name}: {ep.name} ({robot}, {r.source}, driver {ep.driver or '?'}, "
                 f"{verdict}{score}, {'complete' if ep.complete else 'INCOMPLETE'})")
        if other is not None:
            title += f"\ndashed: {Path(compare).name} {other.name}"  # type: ignore[arg-type]
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        desc = {"file": str(path), "robot": robot, "source": r.source, "episode": ep.name,
                "episodes_in_file": len(r), "duration_s": round(ep.duration, 3),
                "commands": len(ep.command), "sensor_samples": len(ep.sensors),
                "cameras": {c: len(cs) for c, cs in cams.items()},
                **{f"attr {k}": v for k, v in sorted(ep.attrs.items())}}
        if other is not None:
            desc["compare"] = f"{compare} {other.name}"
    return buf.getvalue(), desc


def render_episode(path: str | Path, episode: str | int = 0, out: str | Path | None = None,
                   compare: str | Path | None = None) -> Path:
    """Write the plot of one episode to ``out`` (.png, or .html with the PNG beside it).

    Default ``out``: ``<log stem>_<episode>.html`` in the current folder. Returns
    the path written.
    """
    png, desc = render_png(path, episode, compare)
    if out is None:
        out = Path(f"{Path(path).stem}_{desc['episode']}.html")
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise UserError(f"--out {out}: expected a .png or .html file")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: no such folder {out.parent}")
    if suffix == ".png":
        out.write_bytes(png)
        return out
    out.with_suffix(".png").write_bytes(png)
    rows = "\n".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                     for k, v in desc.items())
    b64 = base64.b64encode(png).decode()
    out.write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(Path(path).name)} {html.escape(desc['episode'])}</title>"
        "<style>body{font-family:sans-serif;margin:1em}th{text-align:left;padding-right:1em}"
        "img{max-width:100%}</style></head><body>\n"
        f"<h2>{html.escape(str(path))} &mdash; {html.escape(desc['episode'])}</h2>\n"
        f"<img alt='signals and camera frames' src='data:image/png;base64,{b64}'>\n"
        f"<table>\n{rows}\n</table>\n</body></html>\n")
    return out
