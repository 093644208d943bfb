"""The wall: the student never imports teacher/ and its loader refuses privileged/."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from student_helpers import synthetic_log

from realsim.errors import UserError
from student.config import StudentConfig
from student.dataset import check_keys, load_dataset, required_keys

STUDENT = Path(__file__).resolve().parents[2] / "student"


def test_student_source_never_imports_teacher() -> None:
    files = sorted(STUDENT.glob("**/*.py"))
    assert files
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                    in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                names = [str(node.args[0].value)]
            for n in names:
                assert n.split(".")[0] != "teacher", f"{f.name} imports {n}"


def test_student_source_never_asks_for_privileged_data() -> None:
    for f in sorted(STUDENT.glob("**/*.py")):
        src = f.read_text()
        assert "privileged=True" not in src, f.name
        assert ".privileged()" not in src, f.name


@pytest.mark.parametrize("key", ["privileged/pose", "/privileged/qpos", "privileged",
                                 "episodes/ep_000000/privileged/qpos", "Privileged/x"])
def test_check_keys_refuses_privileged(key: str) -> None:
    with pytest.raises(UserError, match="privileged"):
        check_keys(["command/action", key])


def test_loader_raises_on_privileged_keys_before_opening_anything(tmp_path: Path) -> None:
    cfg = StudentConfig()
    with pytest.raises(UserError, match="privileged"):
        load_dataset([tmp_path / "does_not_exist.h5"], cfg, keys=[*required_keys(cfg), "privileged/pose"])


def test_loader_never_reads_the_privileged_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from realsim.logs import LogReader

    path = synthetic_log(tmp_path / "d.h5", episodes=2, privileged=True)
    seen: list[bool] = []
    orig = LogReader.episode

    def spy(self, key, privileged=False):  # noqa: ANN001, ANN202
        seen.append(privileged)
        ep = orig(self, key, privileged=privileged)
        assert ep.privileged is None
        return ep

    monkeypatch.setattr(LogReader, "episode", spy)
    data = load_dataset([path], StudentConfig(image_width=32, crop_rows=None, history=2))
    assert seen and not any(seen)
    assert len(data) > 0 and data.frames.shape[1:] == (24, 32, 3)
    assert data.tel.shape[1:] == (3, 5) and data.past_actions.shape[1:] == (2, 2)
    assert np.isfinite(data.tel).all()
