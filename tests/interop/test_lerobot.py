"""LeRobotDataset v3 export (layout checked field by field against LeRobot's v3 docs and
its path templates) and SO-101 import (round trip through the arm's log format)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest

from realsim.interop import so101
from realsim.interop.lerobot import export_lerobot, import_lerobot
from realsim.logs import LogReader, control_timeline, resample

INFO_KEYS = {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks",
             "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits",
             "data_path", "video_path", "features"}
FRAME_COLUMNS = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
EPISODE_COLUMNS = {"episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                   "dataset_from_index", "dataset_to_index", "meta/episodes/chunk_index",
                   "meta/episodes/file_index"}
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def _info(root: Path) -> dict:
    return json.loads((root / "meta" / "info.json").read_text())


def test_layout_v3(arm_lerobot: Path, arm_log: Path) -> None:
    info = _info(arm_lerobot)
    assert INFO_KEYS <= set(info)
    assert info["codebase_version"] == "v3.0" and info["fps"] == 50
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["total_episodes"] == 2 and info["total_tasks"] == 1
    assert info["splits"] == {"train": "0:2"}
    feats = info["features"]
    for k, f in feats.items():
        assert {"dtype", "shape", "names"} <= set(f), k
    assert feats["observation.state"] == {"dtype": "float32", "shape": [6], "names": list(so101.NAMES)}
    assert feats["action"]["names"] == list(so101.NAMES)
    for k in FRAME_COLUMNS:
        assert feats[k]["shape"] == [1] and feats[k]["dtype"] == ("float32" if k == "timestamp" else "int64")
    for cam in ("front", "wrist"):
        f = feats[f"observation.images.{cam}"]
        assert f["dtype"] == "video" and f["shape"] == [24, 32, 3]
        assert f["names"] == ["height", "width", "channels"]
        assert f["info"]["video.codec"] == "mpeg4" and f["info"]["video.fps"] == 50

    # data parquet: one row per frame, every non-video feature a column of its shape
    data = pq.read_table(arm_lerobot / info["data_path"].format(chunk_index=0, file_index=0))
    video_keys = {k for k, f in feats.items() if f["dtype"] == "video"}
    assert set(data.column_names) == set(feats) - video_keys
    assert data.num_rows == info["total_frames"]
    assert data.schema.field("observation.state").type.list_size == 6
    d = data.to_pydict()
    np.testing.assert_array_equal(d["index"], np.arange(data.num_rows))
    fi = np.asarray(d["frame_index"])
    np.testing.assert_allclose(d["timestamp"], fi / 50.0, atol=1e-6)

    # episodes metadata
    eps = pq.read_table(arm_lerobot / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["episode_index"] for e in eps] == [0, 1]
    for cam in ("front", "wrist"):
        for c in VIDEO_COLUMNS:
            assert f"videos/observation.images.{cam}/{c}" in eps[0]
    assert EPISODE_COLUMNS <= set(eps[0])
    assert eps[0]["dataset_from_index"] == 0 and eps[0]["dataset_to_index"] == eps[1]["dataset_from_index"]
    assert eps[1]["dataset_to_index"] == info["total_frames"]
    assert sum(e["length"] for e in eps) == info["total_frames"]
    assert eps[0]["tasks"] == ["Put the red cube on the green square."]
    assert "stats/observation.state/mean" in eps[0]
    key = "videos/observation.images.front"
    assert eps[1][f"{key}/from_timestamp"] == pytest.approx(eps[0][f"{key}/to_timestamp"])

    # tasks: task_index column, the text as pandas index "task"
    tasks = pq.read_table(arm_lerobot / "meta/tasks.parquet")
    assert tasks.to_pydict() == {"task_index": [0], "task": ["Put the red cube on the green square."]}
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]

    # stats: every feature, LeRobot's statistics; images per channel (3, 1, 1)
    stats = json.loads((arm_lerobot / "meta/stats.json").read_text())
    assert set(stats) == set(feats)
    for k in ("min", "max", "mean", "std", "count"):
        assert len(stats["observation.state"][k]) == (1 if k == "count" else 6)
    assert np.asarray(stats["observation.images.front"]["mean"]).shape == (3, 1, 1)

    # videos: readable by OpenCV, one frame per row
    for cam in ("front", "wrist"):
        p = arm_lerobot / info["video_path"].format(video_key=f"observation.images.{cam}",
                                                    chunk_index=0, file_index=0)
        cap = cv2.VideoCapture(str(p))
        n = 0
        while cap.read()[0]:
            n += 1
        cap.release()
        assert n == info["total_frames"]


def test_roundtrip_arm(arm_lerobot: Path, arm_log: Path, tmp_path: Path) -> None:
    """export -> import: sensors and commands equal the original resampled onto the grid."""
    back = tmp_path / "back.h5"
    names = import_lerobot(arm_lerobot, back)
    assert names == ["ep_000000", "ep_000001"]
    with LogReader(arm_log) as r0, LogReader(back) as r1:
        assert (r1.robot, r1.source) == ("arm", "real")
        for name in names:
            e0, e1 = r0.episode(name), r1.episode(name)
            t = e1.sensors.t
            assert t[0] == pytest.approx(e0.sensors.t[0])  # the grid starts at the first sample
            np.testing.assert_allclose(np.diff(t), 0.02, atol=1e-9)
            tl = control_timeline(e0, 50.0, t0=t[0], t1=t[-1])
            for k in ("qpos", "qvel", "load"):
                np.testing.assert_allclose(e1.sensors[k], tl[k], atol=2e-5, err_msg=k)
            np.testing.assert_allclose(e1.command["action"], tl["action"], atol=2e-5)
            np.testing.assert_array_equal(e1.command.t, t)
            for cam in ("front", "wrist"):
                cs0, cs1 = e0.cameras[cam], e1.cameras[cam]
                assert len(cs1) == len(t)
                for i in (0, len(t) // 2, len(t) - 1):
                    j = int(np.searchsorted(cs0.t, t[i], side="right") - 1)
                    want = cs0.decode(max(j, 0)).reshape(-1, 3).mean(0)
                    got = cs1.decode(i).reshape(-1, 3).mean(0)
                    np.testing.assert_allclose(got, want, atol=12)


def test_sim_environment_state(arm_sim_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    info = export_lerobot([arm_sim_log], out, fps=25, video=False)
    f = info["features"]["observation.environment_state"]
    assert f["shape"] == [9] and f["names"][:2] == ["arm_qpos_0", "arm_qpos_1"]
    assert info["video_path"] is None and not (out / "videos").exists()
    d = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()
    env = np.asarray(d["observation.environment_state"])
    with LogReader(arm_sim_log) as r:
        ep = r.episode(0, privileged=True)
    t = ep.sensors.t[0] + np.arange(len(env)) / 25.0
    np.testing.assert_allclose(env[:, 6:], resample(ep.privileged["cube_pos_t"], ep.privileged["cube_pos"], t),
                               atol=1e-6)


def test_car_export(car_log: Path, tmp_path: Path) -> None:
    info = export_lerobot([car_log], tmp_path / "car")
    assert info["fps"] == 25  # the command rate
    assert info["features"]["observation.state"]["names"] == ["enc_rad", "yaw_rate", "accel_x",
                                                              "accel_y", "vbat"]
    assert info["features"]["action"]["names"] == ["steer", "throttle"]
    assert "observation.images.front" in info["features"]


def test_import_m100_with_calibration(tmp_path: Path) -> None:
    """LeRobot's default -100..100 mode reaches radians through the calibration ranges."""
    cal = {j: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": 1000, "range_max": 3000}
           for i, j in enumerate(so101.JOINTS)}
    q = so101.lerobot_to_si(np.array([[100.0, -100.0, 0.0, 50.0, 0.0, 50.0]]), "m100", cal)
    half = np.radians(1000 * 360 / 4095)
    np.testing.assert_allclose(q[0, :5], [half, -half, 0.0, half / 2, 0.0])
    assert q[0, 5] == pytest.approx(0.035)


def _foreign_so101(root: Path, n: int = 40, fps: int = 30) -> np.ndarray:
    """A dataset laid out as LeRobot records an SO-101 (default -100..100 mode, no
    velocity, no realsim extras, no videos). Returns the state written."""
    import pyarrow as pa

    names = list(so101.NAMES)
    feats = {"observation.state": {"dtype": "float32", "shape": [6], "names": names},
             "action": {"dtype": "float32", "shape": [6], "names": names},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None},
             "frame_index": {"dtype": "int64", "shape": [1], "names": None},
             "episode_index": {"dtype": "int64", "shape": [1], "names": None},
             "index": {"dtype": "int64", "shape": [1], "names": None},
             "task_index": {"dtype": "int64", "shape": [1], "names": None}}
    info = {"codebase_version": "v3.0", "robot_type": "so101_follower", "fps": fps,
            "total_episodes": 1, "total_frames": n, "data_path": "data/chunk-{chunk_index:03d}/"
            "file-{file_index:03d}.parquet", "video_path": None, "features": feats}
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    k = np.arange(n)
    state = np.stack([50 * np.sin(0.1 * k + j) for j in range(5)] + [50 + 0 * k], 1).astype(np.float32)
    cols = {"observation.state": pa.array(state.tolist(), pa.list_(pa.float32())),
            "action": pa.array((state * 0.9).tolist(), pa.list_(pa.float32())),
            "timestamp": pa.array((k / fps).astype(np.float32)), "frame_index": pa.array(k),
            "episode_index": pa.array(0 * k), "index": pa.array(k), "task_index": pa.array(0 * k)}
    (root / "data" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / "data/chunk-000/file-000.parquet")
    return state


def test_import_foreign_m100(tmp_path: Path) -> None:
    """A LeRobot-recorded SO-101 (-100..100 + calibration file) becomes an arm log in SI."""
    state = _foreign_so101(tmp_path / "ds")
    cal = {j: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": 1048, "range_max": 3048}
           for i, j in enumerate(so101.JOINTS)}
    (tmp_path / "cal.json").write_text(json.dumps(cal))
    out = tmp_path / "arm.h5"
    import_lerobot(tmp_path / "ds", out, units="m100", calibration=tmp_path / "cal.json")
    with LogReader(out) as r:
        ep = r.episode(0)
    q = ep.sensors["qpos"]
    half = np.radians(1000 * 360 / 4095)  # +-100 = half the 2000-count range
    np.testing.assert_allclose(q[:, :5], state[:, :5] / 100 * half, atol=1e-6)
    np.testing.assert_allclose(q[:, 5], 0.035, atol=1e-7)  # 50 % of the 0.07 m opening
    np.testing.assert_allclose(ep.sensors["qvel"], np.gradient(q, ep.sensors.t, axis=0), atol=1e-9)
    assert ep.attrs["qvel_source"] == "derivative of qpos"
    goal = so101.action_to_goal(ep.command["action"])
    np.testing.assert_allclose(goal[:, :5], 0.9 * q[:, :5], atol=1e-5)
    np.testing.assert_allclose(ep.sensors.t, np.arange(len(q)) / 30.0)
    assert ep.cameras == {}
