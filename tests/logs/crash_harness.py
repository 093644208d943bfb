"""Kill-test harness for the log writer: run a writer, SIGKILL it, check the file.

Run as a script it is the *writer*: it appends episodes to PATH forever (until
killed), with sensors at 50 Hz, commands at 25 Hz and ~15 KB frames at
20 fps, all derived deterministically from the episode's seed and row index,
printing ``ready`` once the file is open.  Imported, it offers
``kill_cycle`` (spawn, kill at a random moment, verify, append, re-verify)
used by ``test_crash.py``; ``python crash_harness.py stress N`` runs N cycles.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from realsim.logs import LogReader, LogWriter  # noqa: E402

TICK = 0.01  # s; sensors every 2 ticks, commands every 4, frames every 5
TICKS = 120  # 1.2 s per episode
N_SENS, N_CMD, N_FRAME = TICKS // 2, TICKS // 4, TICKS // 5
FRAME_BYTES = 15000
DRIVER = "crash:test"


def frame_bytes(seed: int, i: int) -> bytes:
    return np.random.default_rng(seed * 100003 + i).bytes(FRAME_BYTES - (i % 7) * 100)


def expected_sensors(seed: int, i: np.ndarray) -> dict[str, np.ndarray]:
    i = np.asarray(i)
    return {
        "t_device": i * 0.02,
        "enc_rad": seed * 1000.0 + i,
        "yaw_rate": np.sin(i * 0.1),
        "accel": np.stack([i * 1.0, -i * 1.0], axis=-1),
        "vbat": np.full(i.shape, 7.4),
        "ack": (i - 1).astype(np.int64),
        "flags": np.full(i.shape, seed, dtype=np.int64),
    }


def expected_action(seed: int, i: np.ndarray) -> np.ndarray:
    i = np.asarray(i)
    return np.stack([np.sin(seed + i * 0.3), np.cos(seed + i * 0.3)], axis=-1).astype(np.float32)


def write_forever(path: str, first_seed: int, flush: float) -> None:
    """The writer process: append episodes until killed."""
    seed = first_seed
    with LogWriter(path, robot="rc_car", source="real", attrs={"firmware": "crash-test"},
                   flush_interval=flush) as w:
        print("ready", flush=True)
        while True:
            ep = w.begin_episode(driver=DRIVER, seed=seed)
            t0 = time.time()
            ns = nc = nf = 0
            for j in range(TICKS):
                target = t0 + j * TICK
                dt = target - time.time()
                if dt > 0:
                    time.sleep(dt)
                t = time.time() - t0
                if j % 2 == 0:
                    x = expected_sensors(seed, np.array(ns))
                    ep.add_sensors(t, float(x["t_device"]), enc_rad=float(x["enc_rad"]),
                                   yaw_rate=float(x["yaw_rate"]), accel=tuple(x["accel"]),
                                   vbat=7.4, ack=int(x["ack"]), flags=int(x["flags"]))
                    ns += 1
                if j % 4 == 0:
                    ep.add_command(t, nc, expected_action(seed, np.array(nc)))
                    nc += 1
                if j % 5 == 0:
                    ep.add_frame("front", t, frame_bytes(seed, nf))
                    nf += 1
            ep.set_attrs(dropped_lines=seed % 3)
            ep.close(success=1, score=float(seed))
            seed += 1


def episode_digest(ep) -> str:
    """Hash of everything an episode holds (attrs, streams, frames)."""
    h = hashlib.sha256()
    h.update(repr(sorted((k, repr(v)) for k, v in ep.attrs.items())).encode())
    for s in (ep.command, ep.sensors):
        h.update(s.t.tobytes())
        for k in sorted(s.fields):
            h.update(k.encode() + np.ascontiguousarray(s.fields[k]).tobytes())
    for c in sorted(ep.cameras):
        h.update(ep.cameras[c].t.tobytes())
        for b in ep.cameras[c].jpeg:
            h.update(b)
    return h.hexdigest()


def check_episode(ep, kill_time: float | None, max_missing: float) -> None:
    """Data equals what the writer generated; counts full if complete."""
    if ep.driver != DRIVER:  # appended by the test itself
        assert ep.complete, ep.name
        return
    seed = ep.seed
    s, c, cam = ep.sensors, ep.command, ep.cameras.get("front")
    ns, nc, nf = len(s), len(c), (len(cam) if cam is not None else 0)
    if ns:
        exp = expected_sensors(seed, np.arange(ns))
        for k, v in exp.items():
            np.testing.assert_array_equal(s[k], v, err_msg=f"{ep.name} sensors/{k}")
        assert np.all(np.diff(s.t) > 0)
    if nc:
        np.testing.assert_array_equal(c["seq"], np.arange(nc))
        np.testing.assert_array_equal(c["action"], expected_action(seed, np.arange(nc)))
    for i in range(nf):
        assert cam.frame(i) == frame_bytes(seed, i), f"{ep.name} frame {i}"
    if ep.complete:
        assert (ns, nc, nf) == (N_SENS, N_CMD, N_FRAME), (ep.name, ns, nc, nf)
        assert ep.success == 1 and ep.score == float(seed)
    else:
        assert kill_time is not None, f"{ep.name} incomplete but no kill happened"
        last = max([x.t[-1] for x in (s, c) if len(x)] + ([cam.t[-1]] if nf else []), default=0.0)
        last = 0.0 if ns + nc + nf == 0 else last
        # an episode whose natural end passed before the kill lost nothing but complete=True
        end = min(kill_time - ep.start_unix, TICKS * TICK)
        missing = end - last
        assert missing <= max_missing, f"{ep.name}: {missing:.2f} s of data missing"


def kill_cycle(path: Path, cycle: int, known: dict[str, str], rng: random.Random,
               max_wait: float = 2.5, flush: float = 0.5,
               live_read: bool = False) -> dict:
    """Spawn a writer, SIGKILL it at a random moment, verify, append, re-verify."""
    cmd = [sys.executable, __file__, "write", str(path), "--seed", str(1000 * (cycle + 1)),
           "--flush", str(flush)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise AssertionError(f"writer did not start: {line!r} {p.stderr.read()}")
        wait = rng.uniform(0.0, max_wait)
        if live_read and wait > 0.3:
            time.sleep(wait / 2)
            with LogReader(path) as r:  # reading a file that is being written
                for ep in r.episodes():
                    check_episode(ep, time.time(), max_missing=math.inf)
            time.sleep(max(0.0, wait / 2 - 0.1))
        else:
            time.sleep(wait)
    finally:
        kill_time = time.time()
        p.kill()
        p.wait()
    max_missing = flush + 0.5
    report = {"wait": wait, "episodes": 0}
    with LogReader(path) as r:
        names = r.episode_names
        report["episodes"] = len(names)
        for ep in r.episodes():
            d = episode_digest(ep)
            if ep.name in known:
                assert known[ep.name] == d, f"{ep.name} changed after a later kill/append"
            else:
                check_episode(ep, kill_time, max_missing)
                known[ep.name] = d
            if not ep.complete:
                report.setdefault("incomplete", []).append(ep.name)
    # resume: append a fresh episode, then everything must still read the same
    with LogWriter(path, robot="rc_car", source="real") as w:
        assert w.episode_names() == names
        ep = w.begin_episode(driver="test:append", seed=-1)
        for i in range(10):
            ep.add_command(i * 0.05, i, [0.0, 0.5])
            ep.add_sensors(i * 0.05, i * 0.05, enc_rad=float(i))
        ep.close(success=0, score=0.0)
    with LogReader(path) as r:
        assert r.episode_names[:-1] == names
        for ep in r.episodes():
            d = episode_digest(ep)
            if ep.name in known:
                assert known[ep.name] == d, f"{ep.name} changed by the append"
            known[ep.name] = d
        last = r.episode(-1)
        assert last.complete and len(last.command) == 10 and len(last.sensors) == 10
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("path")
    w.add_argument("--seed", type=int, default=1000)
    w.add_argument("--flush", type=float, default=0.5)
    s = sub.add_parser("stress")
    s.add_argument("n", type=int)
    s.add_argument("--path", default="/tmp/realsim_crash_stress.h5")
    s.add_argument("--flush", type=float, default=0.5)
    s.add_argument("--max-wait", type=float, default=2.5)
    s.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "write":
        write_forever(a.path, a.seed, a.flush)
        return
    path = Path(a.path)
    path.unlink(missing_ok=True)
    rng = random.Random(a.seed)
    known: dict[str, str] = {}
    ok = fails = 0
    for i in range(a.n):
        try:
            rep = kill_cycle(path, i, known, rng, a.max_wait, a.flush, live_read=(i % 2 == 1))
            ok += 1
            print(f"kill {i}: ok  wait={rep['wait']:.2f}s episodes={rep['episodes']}", flush=True)
        except Exception as e:  # noqa: BLE001
            fails += 1
            print(f"kill {i}: FAIL {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  flush=True)
            # start over on a fresh file so later cycles still measure something
            path.unlink(missing_ok=True)
            known.clear()
    print(f"passed {ok}/{a.n}, failed {fails}")




def sweep(base: Path, work: Path, ns: list[int], flush: float,
          verbose: bool = True) -> list[tuple[int, str]]:
    """Kill the writer exactly at its N-th ``pwrite64`` (strace fault injection).

    Every N gives one of the states a SIGKILL can leave: all writes before the
    N-th done, none after.  ``base`` (if it exists) is copied first so the
    writer also goes through crash recovery and appending.
    """
    import shutil

    failures = []
    for n in ns:
        work.unlink(missing_ok=True)
        known: dict[str, str] = {}
        if base.exists():
            shutil.copy(base, work)
            with LogReader(work) as r:
                known = {e.name: episode_digest(e) for e in r.episodes() if e.complete}
        cmd = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64,write,ftruncate",
               "-e", f"inject=pwrite64,write,ftruncate:signal=KILL:when={n}",
               sys.executable, __file__, "write", str(work), "--seed", "7000",
               "--flush", str(flush)]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        try:
            if not work.exists() or work.stat().st_size == 0:
                verdict = "ok (no file yet)"
            else:
                with LogReader(work) as r:
                    for ep in r.episodes():
                        if ep.name in known:
                            assert episode_digest(ep) == known[ep.name], f"{ep.name} changed"
                        check_episode(ep, time.time(), max_missing=math.inf)
                with LogWriter(work, robot="rc_car", source="real") as w:
                    e = w.begin_episode(driver="test:append")
                    e.add_sensors(0.0, 0.0, enc_rad=1.0)
                    e.close()
                with LogReader(work) as r:
                    for ep in r.episodes():
                        if ep.name in known:
                            assert episode_digest(ep) == known[ep.name], f"{ep.name} changed"
                        check_episode(ep, time.time(), max_missing=math.inf)
                verdict = "ok"
        except Exception as e:  # noqa: BLE001
            verdict = f"FAIL {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            failures.append((n, verdict))
        if verbose:
            print(f"write #{n}: {verdict}", flush=True)
    return failures


def sweep_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("first", type=int)
    ap.add_argument("last", type=int)
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--base", default="")
    ap.add_argument("--work", default="/tmp/realsim_sweep.h5")
    ap.add_argument("--flush", type=float, default=0.5)
    a = ap.parse_args(argv)
    ns = list(range(a.first, a.last + 1, a.step))
    fails = sweep(Path(a.base) if a.base else Path("/nonexistent"), Path(a.work), ns,
                  a.flush)
    print(f"sweep: {len(ns) - len(fails)}/{len(ns)} kill points ok")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "sweep":
        sweep_main(sys.argv[2:])
    else:
        main()
