"""Student training leaves the teacher untouched, and the student never loads teacher code."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from student_helpers import synthetic_log

ROOT = Path(__file__).resolve().parents[2]


def _teacher_fingerprint() -> str:
    """Hash of the teacher's source files and its actions on a fixed simulated episode."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    pp = pytest.importorskip("teacher.pure_pursuit")
    from realsim.robots.rc_car.scene import CarTaskEnv

    h = hashlib.sha256()
    for f in sorted((ROOT / "teacher").glob("**/*.py")):
        h.update(f.read_bytes())
    env = CarTaskEnv(render=False)
    try:
        env.reset(11, distractor=True)
        t = pp.PurePursuitTeacher()
        for _ in range(40):
            a = np.asarray(t.act(env.privileged()), np.float64)
            h.update(a.tobytes())
            env.step(a)
    finally:
        env.close()
    return h.hexdigest()


def test_teacher_is_unchanged_by_student_training(tmp_path: Path) -> None:
    from student.config import StudentConfig
    from student.train import train_student

    before = _teacher_fingerprint()
    cfg = StudentConfig(image_width=32, channels=(8, 16), feature_dim=32, hidden_dim=64, chunk_len=5,
                        batch_size=32, epochs=2, eval_every=1, eval_episodes=2, final_eval_episodes=2,
                        eval_workers=0, footprint_samples=0, threads=1)
    data = synthetic_log(tmp_path / "d.h5", episodes=4)
    train_student([data], tmp_path / "s.pt", cfg, env_spec="student_helpers:FakeEnv", log=lambda m: None)
    assert _teacher_fingerprint() == before


def test_student_modules_load_no_teacher_code() -> None:
    code = ("import sys; import student.cli, student.train, student.deploy, student.evaluate, "
            "student.dataset, student.policy; "
            "print(sorted(m for m in sys.modules if m == 'teacher' or m.startswith('teacher.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, env={**os.environ, "MUJOCO_GL": "egl"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
