"""realsim view: a PNG of signals and camera frames, an HTML page, a replay overlaid."""

from __future__ import annotations

from pathlib import Path

from realsim.interop.view import render_episode

PNG = b"\x89PNG\r\n\x1a\n"


def test_png(arm_log: Path, tmp_path: Path) -> None:
    out = render_episode(arm_log, "1", tmp_path / "ep.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == PNG


def test_html_with_compare(arm_log: Path, car_log: Path, tmp_path: Path) -> None:
    page = render_episode(arm_log, "-1", tmp_path / "page.html", compare=arm_log)
    text = page.read_text()
    assert "data:image/png;base64," in text and "ep_000001" in text and "compare" in text
    assert (tmp_path / "page.png").read_bytes()[:8] == PNG
    car = render_episode(car_log, "ep_000000", tmp_path / "car.png")
    assert car.stat().st_size > 0


def test_interop_imports_no_stage_package() -> None:
    """interop reads logs through realsim.logs only (ARCHITECTURE.md: no stage imports)."""
    import subprocess
    import sys

    code = ("import sys, realsim.interop.cli, realsim.interop.lerobot, realsim.interop.robomimic, "
            "realsim.interop.view; bad = [m for m in ('sysid', 'dynamics', 'teacher', 'student', "
            "'hardware') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
