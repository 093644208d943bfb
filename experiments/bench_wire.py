"""Benchmark the wire: command-to-ack latency and control-loop jitter at 50 Hz.

Starts `realsim emulate rc_car`, runs the real recording path (driver, camera
reader thread, phase-locked control loop, log writer) for one long episode and
prints:
  - command-to-ack latency on the pty: time from writing a DRV to the arrival
    of the first TLM that acknowledges it (median, p99), target median <= 5 ms;
  - control-loop period jitter |period - 20 ms| (median, p99), target p99 <= 5 ms;
  - dropped lines (target 0), camera frames per second.

    python experiments/bench_wire.py --seconds 60
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from hardware.camera import CameraReader
from hardware.emulators.launch import EmulatorProcess
from hardware.rc_car import RcCarDriver
from hardware.recorder import CarRecorder
from hardware.sources import ExcitationSource
from realsim.logs import LogReader, LogWriter
from realsim.robots.rc_car.excite import car_excitation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=50.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess("rc_car", seed=11) as emu:
        out = Path(tmp) / "bench.h5"
        source = ExcitationSource("smooth", lambda s, sd: car_excitation("smooth", s, sd), a.seconds)
        with RcCarDriver(emu.port) as car, CameraReader(emu.camera) as cam, \
                LogWriter(out, robot="rc_car", source="real") as w:
            rec = CarRecorder(car, {"front": cam}, w, rate_hz=a.rate, progress=lambda m: None)
            rec.run(source, episodes=1, seconds=a.seconds)
            lat = np.asarray(car.ack_latencies()) * 1e3
            periods = np.asarray(rec.stats.periods) * 1e3
            dropped = car.dropped
        with LogReader(out) as r:
            ep = r.episode(0)
            cam_t = ep.cameras["front"].t
            fps = (len(cam_t) - 1) / (cam_t[-1] - cam_t[0])
            n_cmd, n_tlm = len(ep.command.t), len(ep.sensors.t)
        stats = emu.stats()
    jit = np.abs(periods - 1e3 / a.rate)
    print(f"episode: {a.seconds:.0f} s at {a.rate:.0f} Hz, {n_cmd} commands, {n_tlm} telemetry samples")
    print(f"command-to-ack latency: median {np.median(lat):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms "
          f"(n={len(lat)}; target median <= 5 ms)")
    print(f"loop period: mean {periods.mean():.3f} ms, jitter median {np.median(jit):.3f} ms, "
          f"p99 {np.percentile(jit, 99):.3f} ms, max {jit.max():.2f} ms (target p99 <= 5 ms)")
    print(f"dropped lines: host {dropped}, device {stats['lines_dropped_total']} (target 0)")
    print(f"camera: {fps:.1f} frames/s recorded")


if __name__ == "__main__":
    main()
