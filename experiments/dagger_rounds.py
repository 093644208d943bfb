"""Does DAgger help the car's student, and does a recoverability gate change that?

The method's authors found DAgger made things worse and blamed the privileged solver
being undefined off its own solution manifold. If that is the cause, relabelling only the
states from which the teacher still succeeds (`realsim dagger --gate`) should help where
vanilla DAgger (`--no-gate`) does not. Protocol (every step a `realsim` subprocess, so
the public CLI is what is measured):

1. teach: `realsim teach rc_car --episodes T --seed 0` (a SMALL teacher set, default 40).
2. base: `realsim train-student` on it at a reduced budget (default 4 epochs), so the
   student has room to improve (the full default student is at 98 %).
3. arms, each R rounds (default 3) starting from the base:
   - gate:   `realsim dagger --gate` with the arm's current student (D episodes, seed
             1000 + r), then fine-tune (`train-student --init`) on teach + all the arm's
             DAgger files so far;
   - nogate: the same with `--no-gate --audit` (every state kept; the gate's checks still
             run, only to count how many kept labels lie on unrecoverable states);
   - none:   the control: the same fine-tuning on the teach file alone (as many extra
             epochs, no new data), to separate DAgger's data from more training.
   Round 1 of gate and nogate drives the same base student on the same seeds: the same
   rollouts, differing only in what is kept.
4. after every round: closed-loop success of the kept checkpoint over `--eval-episodes`
   (default 30) robust episodes, as `student/evaluate.py` runs them (action noise 0.05,
   distractor on in every other episode; `train-student`'s own final evaluation on the
   fresh seeds 110000.., the same seeds for every checkpoint: paired comparisons).

Retraining: fine-tuning (`--init` the arm's previous checkpoint, `--ft-epochs` epochs at
`--ft-lr`) on the whole aggregate, teacher data included: DAgger's aggregate-and-retrain
at a fraction of from-scratch cost on this shared 2-core machine (from scratch would
repeat the base's epochs every round), and the teacher data in every round keeps the
student from drifting onto the relabels alone.

Run: `python experiments/dagger_rounds.py --out runs/dagger_rounds` (resumable: a step
whose output exists is not rerun). Prints the table last; writes DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REALSIM = [sys.executable, "-m", "realsim"]
ENV = {**os.environ, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(cmd: list[str], log: Path) -> str:
    """Run `cmd` (cwd: the repo), stdout+stderr to `log`; returns its last stdout line."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=f, text=True)
        f.write(p.stdout)
        f.write(f"\n[exit {p.returncode}, {time.monotonic() - t0:.0f} s]\n")
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {shlex.join(cmd)}; see {log}")
    lines = [x for x in p.stdout.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def kv(line: str) -> dict[str, str]:
    """'a=1 b=x' -> {'a': '1', 'b': 'x'}."""
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def train_sets(a: argparse.Namespace, epochs: int, lr: float | None = None) -> list[str]:
    """The reduced-budget training settings (one selection evaluation, at the last epoch,
    on few episodes; the printed figure is the final evaluation on `eval_episodes`)."""
    sets = {"epochs": epochs, "eval_every": epochs, "eval_episodes": a.select_episodes,
            "eval_workers": 0, "final_eval_episodes": a.eval_episodes, "threads": 1,
            "footprint_samples": 0}
    if lr is not None:
        sets["lr"] = lr
    out: list[str] = []
    for k, v in sets.items():
        out += ["--set", f"{k}={v}"]
    return out


def train(a: argparse.Namespace, data: list[Path], out: Path, epochs: int,
          init: Path | None = None, lr: float | None = None) -> float:
    """train-student (cached: an existing checkpoint's recorded success is reused)."""
    res = out.with_suffix(".json")
    if out.exists() and res.exists():
        return float(json.loads(res.read_text())["success"])
    cmd = [*REALSIM, "train-student", "rc_car", "--data", *map(str, data), "--out", str(out),
           *train_sets(a, epochs, lr)]
    if init is not None:
        cmd += ["--init", str(init)]
    t0 = time.monotonic()
    last = run(cmd, out.with_suffix(".log"))
    rec = {"success": float(kv(last)["success"]), "episodes": int(kv(last)["episodes"]),
           "seconds": time.monotonic() - t0, "data": [str(d) for d in data]}
    res.write_text(json.dumps(rec))
    return rec["success"]


def dagger(a: argparse.Namespace, policy: Path, out: Path, seed: int, gate: bool) -> dict[str, Any]:
    """One `realsim dagger` round (cached)."""
    res = out.with_suffix(".dagger.json")  # not the checkpoint's .json/.log of the same round
    if out.exists() and res.exists():
        return json.loads(res.read_text())
    out.unlink(missing_ok=True)  # a round interrupted before its counts were saved: redo it
    cmd = [*REALSIM, "dagger", "rc_car", "--policy", str(policy), "--episodes",
           str(a.dagger_episodes), "--out", str(out), "--seed", str(seed),
           "--gate-every", str(a.gate_every)]
    cmd += ["--gate"] if gate else ["--no-gate", "--audit"]
    t0 = time.monotonic()
    last = run(cmd, out.with_suffix(".dagger.log"))
    rec: dict[str, Any] = {k: v for k, v in kv(last).items() if k != "out"}
    rec["seconds"] = time.monotonic() - t0
    res.write_text(json.dumps(rec))
    return rec


def arm(a: argparse.Namespace, name: str, teach: Path, base: Path, d: Path) -> list[dict[str, Any]]:
    """R rounds of one arm; a row per round."""
    rows = []
    policy, files = base, [teach]
    for r in range(1, a.rounds + 1):
        t0 = time.monotonic()
        row: dict[str, Any] = {"arm": name, "round": r}
        if name in ("gate", "nogate"):
            f = d / f"{name}_r{r}.h5"
            row["dagger"] = dagger(a, policy, f, 1000 + r, gate=(name == "gate"))
            files = [*files, f]
        ck = d / f"{name}_r{r}.pt"
        row["success"] = train(a, files, ck, a.ft_epochs, init=policy, lr=a.ft_lr)
        row["seconds"] = time.monotonic() - t0
        policy = ck
        rows.append(row)
        print(f"[{time.strftime('%H:%M:%S')}] {name} round {r}: success {row['success']:.3f} "
              f"{row.get('dagger', '')}", flush=True)
    return rows


def final_eval(ck: Path, n: int, seed0: int) -> dict[str, Any]:
    """Closed-loop success of `ck` over n robust episodes from seed0 (cached), in a
    single-threaded subprocess through `student.evaluate.evaluate_checkpoint`."""
    res = ck.with_suffix(f".final{n}_{seed0}.json")
    if res.exists():
        return json.loads(res.read_text())
    code = ("import json, sys, torch; torch.set_num_threads(1); "
            "from student.evaluate import evaluate_checkpoint; "
            f"r = evaluate_checkpoint({str(ck)!r}, {n}, {seed0}, workers=0); "
            "print(json.dumps({'success': r.success_rate, 'episodes': len(r.episodes), "
            "'by_distractor': {str(k): v for k, v in r.by_distractor().items()}}))")
    rec = json.loads(run([sys.executable, "-c", code], ck.with_suffix(f".final{n}.log")))
    res.write_text(json.dumps(rec))
    return rec


def table(base: float, rows: list[dict[str, Any]], n_eval: int) -> str:
    hdr = (f"{'arm':7} {'round':>5} {'visited':>8} {'relabelled':>10} {'rejected':>8} "
           f"{'checks':>6} {'ck_rej':>6} {'stud_win':>8} {'success':>8}")
    out = [hdr, f"{'base':7} {0:>5} {'-':>8} {'-':>10} {'-':>8} {'-':>6} {'-':>6} {'-':>8} "
           f"{base:>8.3f}"]
    for r in rows:
        g = r.get("dagger", {})
        out.append(f"{r['arm']:7} {r['round']:>5} {g.get('visited', '-'):>8} "
                   f"{g.get('relabelled', '-'):>10} {g.get('rejected', '-'):>8} "
                   f"{g.get('checks', '-'):>6} {g.get('checks_rejected', '-'):>6} "
                   f"{g.get('student_success', '-'):>8} {r['success']:>8.3f}")
    out.append(f"success: closed-loop sim success over {n_eval} robust episodes (seeds 110000..)")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/dagger_rounds")
    p.add_argument("--teach-episodes", type=int, default=40)
    p.add_argument("--base-epochs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dagger-episodes", type=int, default=10)
    p.add_argument("--gate-every", type=int, default=5)
    p.add_argument("--ft-epochs", type=int, default=2)
    p.add_argument("--ft-lr", type=float, default=5e-4)
    p.add_argument("--eval-episodes", type=int, default=30)
    p.add_argument("--select-episodes", type=int, default=4)
    p.add_argument("--arms", default="gate,nogate,none")
    p.add_argument("--final-eval", type=int, default=0, metavar="N",
                   help="also evaluate the base and each arm's last checkpoint on N more "
                   "episodes from seed 500000 (a tighter figure than the per-round 30)")
    p.add_argument("--parallel", action="store_true", help="run the arms concurrently "
                   "(one single-threaded process each)")
    a = p.parse_args()
    d = Path(a.out)
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] start; load {os.getloadavg()}", flush=True)
    teach = d / "teach.h5"
    if not (d / "teach.done").exists():
        teach.unlink(missing_ok=True)
        run([*REALSIM, "teach", "rc_car", "--episodes", str(a.teach_episodes), "--out", str(teach),
             "--seed", "0", "--workers", "1", "--no-progress"], d / "teach.log")
        (d / "teach.done").write_text("ok")
    base = d / "base.pt"
    base_success = train(a, [teach], base, a.base_epochs)
    print(f"[{time.strftime('%H:%M:%S')}] base: success {base_success:.3f}", flush=True)
    arms = [x for x in a.arms.split(",") if x]
    bad = set(arms) - {"gate", "nogate", "none"}
    if bad:
        raise SystemExit(f"unknown arm(s) {sorted(bad)}")
    if a.parallel:
        with ThreadPoolExecutor(len(arms)) as ex:
            futs = [ex.submit(arm, a, n, teach, base, d) for n in arms]
            rows = [r for f in futs for r in f.result()]
    else:
        rows = [r for n in arms for r in arm(a, n, teach, base, d)]
    finals: dict[str, Any] = {}
    if a.final_eval > 0:
        cks = {"base": base, **{n: d / f"{n}_r{a.rounds}.pt" for n in arms}}
        with ThreadPoolExecutor(2 if a.parallel else 1) as ex:
            futs = {k: ex.submit(final_eval, ck, a.final_eval, 500_000) for k, ck in cks.items()}
            finals = {k: f.result() for k, f in futs.items()}
    wall = time.monotonic() - t0
    (d / "results.json").write_text(json.dumps({"base": base_success, "rows": rows,
                                                "final_eval": finals, "args": vars(a),
                                                "wall_s": wall}, indent=1))
    print(f"[{time.strftime('%H:%M:%S')}] done in {wall / 60:.1f} min; load {os.getloadavg()}")
    print(table(base_success, rows, a.eval_episodes))
    for k, r in finals.items():
        print(f"final eval {k:7} ({'base' if k == 'base' else f'round {a.rounds}'}): "
              f"success {r['success']:.3f} over {r['episodes']} episodes (seeds 500000..; "
              f"distractor off {r['by_distractor']['False']:.3f}, on {r['by_distractor']['True']:.3f})")


if __name__ == "__main__":
    main()
