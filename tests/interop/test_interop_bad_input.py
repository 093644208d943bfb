"""Every bad input of export/import/view: one line on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from realsim.cli import main
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    foreign = d / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = [1, 2, 3]
    corrupt = d / "corrupt.h5"
    corrupt.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00garbage" * 50)
    noinfo = d / "noinfo"
    (noinfo / "meta").mkdir(parents=True)
    badjson = d / "badjson"
    (badjson / "meta").mkdir(parents=True)
    (badjson / "meta" / "info.json").write_text("{not json")
    v2 = d / "v2"
    (v2 / "meta").mkdir(parents=True)
    (v2 / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "features": {},
                                                        "fps": 30, "data_path": "x"}))
    return {"dir": d, "foreign": foreign, "corrupt": corrupt, "noinfo": noinfo,
            "badjson": badjson, "v2": v2}


CASES = {
    "export missing file": (["export", "{dir}/nope.h5", "--format", "lerobot", "--out", "{dir}/o1"], "nope.h5"),
    "export foreign hdf5": (["export", "{foreign}", "--format", "robomimic", "--out", "{dir}/o2.hdf5"],
                            "not a realsim log"),
    "export corrupt hdf5": (["export", "{corrupt}", "--format", "lerobot", "--out", "{dir}/o3"], "corrupt.h5"),
    "export unknown format": (["export", "{foreign}", "--format", "rlds", "--out", "{dir}/o4"], "rlds"),
    "export mixed robots": (["export", "{arm}", "{car}", "--format", "lerobot", "--out", "{dir}/o5"],
                            "one robot at a time"),
    "export out exists": (["export", "{arm}", "--format", "robomimic", "--out", "{arm}"], "already exists"),
    "import no info.json": (["import", "lerobot", "{noinfo}", "--out", "{dir}/i1.h5"], "meta/info.json"),
    "import missing dir": (["import", "lerobot", "{dir}/nodir", "--out", "{dir}/i2.h5"], "nodir"),
    "import bad json": (["import", "lerobot", "{badjson}", "--out", "{dir}/i3.h5"], "info.json"),
    "import v2 dataset": (["import", "lerobot", "{v2}", "--out", "{dir}/i4.h5"], "v2.1"),
    "import out folder missing": (["import", "lerobot", "{lerobot}", "--out", "{dir}/no/i7.h5"],
                                  "no such folder"),
    "export out folder missing": (["export", "{arm}", "--format", "robomimic", "--out",
                                   "{dir}/no/o6.hdf5"], "no such folder"),
    "import unknown format": (["import", "rlds", "{noinfo}", "--out", "{dir}/i5.h5"], "rlds"),
    "import m100 without calibration": (["import", "lerobot", "{lerobot}", "--units", "m100", "--out",
                                         "{dir}/i6.h5"], "--calibration"),
    "view missing file": (["view", "{dir}/nope.h5"], "nope.h5"),
    "view foreign file": (["view", "{foreign}"], "not a realsim log"),
    "view no such episode": (["view", "{arm}", "--episode", "9"], "no episode"),
    "view bad out": (["view", "{arm}", "--out", "{dir}/x.pdf"], ".png or .html"),
    "view compare other robot": (["view", "{arm}", "--compare", "{car}", "--out", "{dir}/v.png"], "rc_car"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_exit_2(case: str, bad: dict[str, Path], arm_log: Path, car_log: Path,
                         arm_lerobot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, needle = CASES[case]
    paths = {**bad, "arm": arm_log, "car": car_log, "lerobot": arm_lerobot}
    rc = main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("realsim: error:"), err
    assert needle in lines[0], (needle, lines[0])


def test_wired_into_the_cli(arm_log: Path, tmp_path: Path) -> None:
    """The console entry point as a user runs it (bad inputs above go through the same
    ``main``; one subprocess is enough: each start pays the CLI's import time)."""
    p = run_cli("view", arm_log, "--out", tmp_path / "v.png")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'v.png'}"
