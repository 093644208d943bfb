"""DIR/report.md with PNG overlays of real, nominal and fitted signals per episode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sysid.data import make_segments, sim_signals  # noqa: E402

if TYPE_CHECKING:
    from sysid.fit import FitResult

MAX_PLOTS = 6


def _plot(path: Path, title: str, t: np.ndarray, real: dict, nom: dict, fit: dict,
          signals: Sequence[str], units: Mapping[str, str]) -> None:
    """One panel per signal: real, nominal and fitted over t (K,); each dict maps a
    signal name to its (K,) series."""
    fig, axes = plt.subplots(len(signals), 1, figsize=(9, max(8, 1.4 * len(signals))), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]
    for ax, s in zip(axes, signals, strict=True):
        ax.plot(t, real[s], "k", lw=1.0, label="real (log)")
        ax.plot(t, nom[s], "tab:blue", lw=0.9, alpha=0.8, label="nominal")
        ax.plot(t, fit[s], "tab:red", lw=0.9, alpha=0.8, label="fitted")
        ax.set_ylabel(f"{s}\n[{units.get(s, '')}]", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8, ncol=3)
    axes[0].set_title(title, fontsize=9)
    axes[-1].set_xlabel("t [s] (open-loop replay)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(res: FitResult, out: Path, nthread: int = 2,
                 replays: Mapping[str, tuple[dict, dict]] | None = None) -> Path:
    """report.md: RMSE table, parameter table, one overlay PNG per (held-out first) episode.

    ``replays``: episode key -> (nominal, fitted) whole-episode replays already simulated
    (the fit's RMSE table); episodes missing from it are simulated here."""
    ad = res.adapter
    SIGNALS, UNITS = ad.signals, ad.units  # noqa: N806
    lines = [f"# System identification report: {ad.robot}", "",
             f"Backend `{res.meta['backend']}`, sampler `{res.meta['sampler']}`, "
             f"{res.meta['trials']} trials, {res.meta['evaluations']} parameter sets simulated, "
             f"wall time {res.meta['wall_s']['total']} s.", "",
             "## Open-loop RMSE, whole episodes from rest (nominal -> fitted)", "",
             "| split | " + " | ".join(f"{s} [{UNITS[s]}]" for s in SIGNALS) + " |",
             "|---|" + "---|" * len(SIGNALS)]
    for split, d in res.rmse.items():
        cells = [f"{d['nominal'][s]:.4g} -> {d['fitted'][s]:.4g} ({d['fitted'][s] / max(d['nominal'][s], 1e-12):.2f}x)"
                 for s in SIGNALS]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    lines += ["", "## Parameters", "", "| name | fitted | 95 % interval | identifiable | nominal | range | unit |",
              "|---|---|---|---|---|---|---|"]
    for p in ad.parameters:
        v = res.fitted.get(p.name, res.prior[p.name])
        if p.name not in res.names:
            ci, ok = "not fitted", "-"
        elif res.identifiable[p.name]:
            ci, ok = f"{v - res.half[p.name]:.4g} .. {v + res.half[p.name]:.4g}", "yes"
        else:
            at_prior = bool(np.isclose(v, res.prior[p.name], rtol=1e-9, atol=0.0))
            at_bound = v in (p.low, p.high)
            ci = "(logs do not determine it)"
            ok = ("**no** (prior kept)" if at_prior else "**no** (at a bound the logs push against)"
                  if at_bound else "**no** (fit's value kept: the prior cost more)")
        lines.append(f"| {p.name} | {v:.4g} | {ci} | {ok} | {p.nominal:g} | {p.low:g} .. {p.high:g} | {p.unit} |")
    eps = (res.held + res.train)[:MAX_PLOTS]
    if eps:
        segs = make_segments(eps, ad, 0.0)
        replays = dict(replays or {})
        todo = [i for i, e in enumerate(eps) if e.uid not in replays]
        if todo:
            sims = ad.replay_batch([ad.nominal, res.fitted], [segs[i].inp for i in todo], nthread)
            replays.update({eps[i].uid: (sims[0][k], sims[1][k]) for k, i in enumerate(todo)})
        lines += ["", "## Episodes (real, nominal, fitted)", ""]
        for i, seg in enumerate(segs):
            e = seg.episode
            split = "held-out" if e in res.held else "train"
            png = f"episode_{i:02d}_{e.name}.png"
            t = np.asarray(seg.inp.sensor_t)
            _plot(out / png, f"{e.key} ({split})", t, {s: e.signals[s] for s in SIGNALS},
                  sim_signals(ad, seg, replays[e.uid][0]), sim_signals(ad, seg, replays[e.uid][1]),
                  SIGNALS, UNITS)
            lines += [f"### {e.key} ({split})", "", f"![{e.name}]({png})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
