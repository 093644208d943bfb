"""LeRobotDataset v3.0 out of realsim logs, and SO-101 LeRobotDatasets into realsim logs.

Layout written (LeRobot's ``docs/source/lerobot-dataset-v3.mdx`` and the path
templates of ``lerobot/datasets/utils.py``)::

    OUT/meta/info.json                       codebase_version "v3.0", fps, features, totals,
                                             data_path / video_path templates, splits
    OUT/meta/stats.json                      per feature: min max mean std count q01..q99
    OUT/meta/tasks.parquet                   task_index, with the task text as pandas index "task"
    OUT/meta/episodes/chunk-000/file-000.parquet
                                             per episode: episode_index, tasks, length,
                                             data/{chunk,file}_index, dataset_{from,to}_index,
                                             videos/<key>/{chunk_index,file_index,from_timestamp,
                                             to_timestamp}, meta/episodes/{chunk,file}_index,
                                             stats/<feature>/<stat>
    OUT/data/chunk-000/file-000.parquet      one row per control tick of every episode
    OUT/videos/observation.images.<cam>/chunk-000/file-000.mp4
                                             every episode's frames back to back

Rows: ``observation.state``, ``action`` (plus ``observation.velocity`` and
``observation.effort`` for the arm, ``observation.environment_state`` for sim logs
with privileged data), ``timestamp`` (= frame_index / fps), ``frame_index``,
``episode_index``, ``index``, ``task_index``.

Units: the arm in LeRobot's SO-101 convention with ``use_degrees=True``
(:mod:`realsim.interop.so101`): positions and goal positions in degrees, gripper
0..100 %, names ``<joint>.pos``; velocity in the same units per second
(``<joint>.vel``); effort = the servo load, signed fraction of max
(``<joint>.load``). The car in SI: state ``enc_rad, yaw_rate, accel_x, accel_y,
vbat``, action ``steer, throttle`` in [-1, 1].

Videos are MPEG-4 Part 2 (``mp4v``, codec name ``mpeg4``, yuv420p) written by
OpenCV: LeRobot's own default is AV1 (libsvtav1), which OpenCV cannot write here;
LeRobot's decoders (torchcodec, pyav) read mpeg4. All episodes go into one data
file and one video file per camera (LeRobot rolls over at 100 MB / 500 MB; this
writer does not).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from realsim.errors import UserError
from realsim.interop import so101
from realsim.interop.table import (
    FrameCache,
    Rows,
    env_matrix,
    episode_rows,
    finite_or_zero,
    flatten,
    guess_fps,
    open_logs,
    state_fields,
    summary_stats,
    warn,
)

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_FILE_MB = 100
VIDEO_FILE_MB = 500
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS = {"arm": "Put the red cube on the green square.", "rc_car": "Reach the orange cone."}
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
VIDEO_SAMPLES = 16  # frames per episode and camera that feed the image statistics


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UserError("LeRobot datasets need pyarrow: pip install 'realsim[interop]'") from None
    return pyarrow


# ---------------------------------------------------------------- export
def _vectors(robot: str, rows: Rows) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Per-row vector features of one episode: key -> ((T, k) float32, names)."""
    T = len(rows)
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    s = rows.sensors
    if robot == "arm" and "qpos" in s and rows.action.shape[1] in (0, 6):
        out["observation.state"] = (so101.si_to_lerobot(s["qpos"]), list(so101.NAMES))
        act = rows.action if rows.action.shape[1] else np.zeros((T, 6), np.float32)
        out["action"] = (so101.si_to_lerobot(so101.action_to_goal(act)), list(so101.NAMES))
        if "qvel" in s:
            out["observation.velocity"] = (so101.si_to_lerobot(s["qvel"]),
                                           [f"{j}.vel" for j in so101.JOINTS])
        if "load" in s:
            out["observation.effort"] = (np.asarray(s["load"], float).reshape(T, -1),
                                         [f"{j}.load" for j in so101.JOINTS])
    else:
        out["observation.state"] = flatten(s, state_fields(robot, s), T)
        names = (["steer", "throttle"] if robot == "rc_car" and rows.action.shape[1] == 2
                 else [f"action_{i}" for i in range(rows.action.shape[1])])
        out["action"] = (np.asarray(rows.action, float), names)
    if rows.env:
        out["observation.environment_state"] = env_matrix(rows)
    return {k: (finite_or_zero(v).astype(np.float32), n) for k, (v, n) in out.items()}


def _check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: already exists and is not an empty folder; choose another --out")


def export_lerobot(paths: Sequence[str | Path], out: str | Path, fps: int | None = None,
                   task: str | None = None, video: bool = True) -> dict[str, Any]:
    """Write the complete episodes of ``paths`` (one robot) as a LeRobotDataset v3.0 in ``out``.

    Written into ``OUT.partial`` and renamed when whole, so a failed export leaves
    nothing half-made under ``out``. Returns the ``info.json`` written. One-line
    UserError for bad input.
    """
    out = Path(out)
    _check_out_dir(out)
    _pyarrow()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        info = _export(paths, tmp, fps, task, video)
        if out.exists():
            out.rmdir()  # empty, checked above
        tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _export(paths: Sequence[str | Path], out: Path, fps: int | None, task: str | None,
            video: bool) -> dict[str, Any]:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    with contextlib.ExitStack() as stack:
        robot, episodes = open_logs(stack, paths)
        fps = int(fps) if fps else guess_fps(episodes)
        if fps <= 0:
            raise UserError(f"--fps must be positive, got {fps}")
        rows = [episode_rows(ep, fps) for ep in episodes]
        vecs = [_vectors(robot, r) for r in rows]
        vecs = _common_features(vecs, [ep.name for ep in episodes])
        cams = sorted({c for r in rows for c in r.frames}) if video else []
        task = task or TASKS.get(robot, f"realsim {robot}")

        out.mkdir(parents=True, exist_ok=True)
        n_total = sum(len(r) for r in rows)
        starts = np.cumsum([0] + [len(r) for r in rows])
        video_meta, video_info, video_stats = _write_videos(out, rows, cams, fps)

        # ---- data/chunk-000/file-000.parquet
        keys = list(vecs[0])
        cols: dict[str, Any] = {}
        for k in keys:
            m = np.concatenate([v[k][0] for v in vecs]).astype(np.float32)
            cols[k] = pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), m.shape[1])
        frame_index = np.concatenate([np.arange(len(r)) for r in rows]).astype(np.int64)
        cols["timestamp"] = pa.array((frame_index / fps).astype(np.float32))
        cols["frame_index"] = pa.array(frame_index)
        cols["episode_index"] = pa.array(np.repeat(np.arange(len(rows)), [len(r) for r in rows]).astype(np.int64))
        cols["index"] = pa.array(np.arange(n_total, dtype=np.int64))
        cols["task_index"] = pa.array(np.zeros(n_total, np.int64))
        data_file = out / DATA_PATH.format(chunk_index=0, file_index=0)
        data_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), data_file, compression="snappy")

        # ---- features, stats
        features: dict[str, dict[str, Any]] = {}
        for k in keys:
            m, names = vecs[0][k]
            features[k] = {"dtype": "float32", "shape": [m.shape[1]], "names": names}
        for cam in cams:
            info = video_info[cam]
            features[f"observation.images.{cam}"] = {
                "dtype": "video", "shape": [info["video.height"], info["video.width"], 3],
                "names": ["height", "width", "channels"], "info": info}
        features.update(json.loads(json.dumps(DEFAULT_FEATURES)))
        scalars = {"timestamp": frame_index / fps, "frame_index": frame_index,
                   "episode_index": np.asarray(cols["episode_index"]), "index": np.arange(n_total),
                   "task_index": np.zeros(n_total)}
        stats = {k: summary_stats(np.concatenate([v[k][0] for v in vecs])) for k in keys}
        for cam in cams:
            stats[f"observation.images.{cam}"] = _image_stats(np.concatenate(video_stats[cam]))
        stats |= {k: summary_stats(np.asarray(v, float)) for k, v in scalars.items()}

        # ---- meta/episodes, meta/tasks, meta/info.json, meta/stats.json
        ep_rows = []
        for i, (r, v) in enumerate(zip(rows, vecs, strict=True)):
            lo, hi = int(starts[i]), int(starts[i + 1])
            row: dict[str, Any] = {
                "episode_index": i, "tasks": [task], "length": len(r),
                "data/chunk_index": 0, "data/file_index": 0,
                "dataset_from_index": lo, "dataset_to_index": hi}
            for cam in cams:
                row |= {f"videos/observation.images.{cam}/{k}": val for k, val in video_meta[cam][i].items()}
            row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
            ep_stats = {k: summary_stats(v[k][0]) for k in keys}
            for cam in cams:
                ep_stats[f"observation.images.{cam}"] = _image_stats(video_stats[cam][i])
            ep_stats |= {k: summary_stats(np.asarray(val, float)[lo:hi]) for k, val in scalars.items()}
            for feat, st in ep_stats.items():
                row |= {f"stats/{feat}/{name}": val for name, val in st.items()}
            row |= {"realsim/source_episode": episodes[i].name, "realsim/t0": float(r.t[0]),
                    "realsim/success": int(episodes[i].success),
                    "realsim/score": float(episodes[i].score)}
            ep_rows.append(row)
        ep_file = out / EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(ep_rows), ep_file)
        _write_tasks(pa, pq, out / "meta" / "tasks.parquet", [task])
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": f"realsim_{robot}",
            "total_episodes": len(rows), "total_frames": n_total, "total_tasks": 1,
            "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": DATA_FILE_MB,
            "video_files_size_in_mb": VIDEO_FILE_MB, "fps": fps,
            "splits": {"train": f"0:{len(rows)}"}, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if cams else None, "features": features}
        _write_json(out / "meta" / "info.json", info)
        _write_json(out / "meta" / "stats.json", stats)
    return info


def _common_features(vecs: list[dict[str, tuple[np.ndarray, list[str]]]],
                     names: list[str]) -> list[dict[str, tuple[np.ndarray, list[str]]]]:
    """Keep only features every episode has with one width (a LeRobot table has one schema)."""
    keys = [k for k in vecs[0] if all(k in v and v[k][0].shape[1] == vecs[0][k][0].shape[1]
                                      for v in vecs)]
    for k in {k for v in vecs for k in v} - set(keys):
        if k in ("observation.state", "action"):
            raise UserError(f"{k} differs in width between episodes ({', '.join(names[:3])}...); "
                            "export them separately")
        warn(f"{k} left out: not every episode has it with the same width")
    return [{k: v[k] for k in keys} for v in vecs]


def _write_videos(out: Path, rows: list[Rows], cams: list[str], fps: int
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]],
                             dict[str, list[np.ndarray]]]:
    """One mp4 per camera, episodes back to back; returns per-episode offsets, the
    feature ``info`` and sampled pixels (N, 3) per episode for the statistics."""
    import cv2

    meta: dict[str, list[dict[str, Any]]] = {}
    info: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[np.ndarray]] = {}
    for cam in cams:
        first = next(r for r in rows if cam in r.frames)
        h, w = FrameCache(first.cameras[cam]).rgb(int(first.frames[cam][0])).shape[:2]
        path = out / VIDEO_PATH.format(video_key=f"observation.images.{cam}", chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
        if not vw.isOpened():
            raise UserError(f"{path}: OpenCV cannot write mp4 here (no FFmpeg backend?); "
                            "use --no-video")
        meta[cam], samples[cam] = [], []
        offset = 0
        try:
            for r in rows:
                n = len(r)
                pick = set(np.linspace(0, n - 1, min(VIDEO_SAMPLES, n)).astype(int).tolist())
                px = []
                if cam not in r.frames:
                    warn(f"episode {r.name}: no {cam} camera; its video is black")
                cache = FrameCache(r.cameras[cam], (w, h)) if cam in r.frames else None
                for i in range(n):
                    img = cache.rgb(int(r.frames[cam][i])) if cache else np.zeros((h, w, 3), np.uint8)
                    vw.write(cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
                    if i in pick:
                        px.append(img[::4, ::4].reshape(-1, 3))
                samples[cam].append(np.concatenate(px) / 255.0)
                meta[cam].append({"chunk_index": 0, "file_index": 0,
                                  "from_timestamp": offset / fps, "to_timestamp": (offset + n) / fps})
                offset += n
        finally:
            vw.release()
        info[cam] = {"video.height": h, "video.width": w, "video.codec": "mpeg4",
                     "video.pix_fmt": "yuv420p", "video.is_depth_map": False,
                     "video.fps": fps, "video.channels": 3, "has_audio": False}
    return meta, info, samples


def _image_stats(px: np.ndarray) -> dict[str, Any]:
    """Per-channel statistics of pixels in [0, 1], each shaped (3, 1, 1) as LeRobot keeps them."""
    st = summary_stats(px)
    return {k: (v if k == "count" else [[[x]] for x in v]) for k, v in st.items()}


def _write_tasks(pa: Any, pq: Any, path: Path, tasks: list[str]) -> None:
    """``tasks.parquet`` as LeRobot writes it with pandas: column ``task_index``, the task
    text as the index named ``task`` (the pandas metadata says so; no pandas needed)."""
    t = pa.table({"task_index": pa.array(np.arange(len(tasks), dtype=np.int64)),
                  "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": "task", "field_name": "task", "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0"}
    t = t.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4, allow_nan=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


# ---------------------------------------------------------------- import
def read_info(root: str | Path) -> dict[str, Any]:
    """``meta/info.json`` of a LeRobotDataset v3 folder; one-line UserError if it is not one."""
    root = Path(root)
    if not root.exists():
        raise UserError(f"no such folder: {root}")
    if not root.is_dir():
        raise UserError(f"{root}: not a folder (a LeRobotDataset is a folder with meta/info.json)")
    p = root / "meta" / "info.json"
    if not p.is_file():
        raise UserError(f"{root}: not a LeRobotDataset (no meta/info.json)")
    try:
        info = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{p}: unreadable ({' '.join(str(e).split())})") from None
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise UserError(f"{p}: no features mapping; not a LeRobotDataset info.json")
    ver = str(info.get("codebase_version", ""))
    if not ver.startswith("v3"):
        raise UserError(f"{p}: codebase_version {ver or '?'!r}; only v3.x is read (convert with "
                        "LeRobot's convert_dataset_v21_to_v30)")
    for k in ("data_path", "fps"):
        if k not in info:
            raise UserError(f"{p}: no {k!r}")
    return info


def _read_table(path: Path, columns: list[str] | None = None) -> dict[str, Any]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=columns).to_pydict()
    except Exception as e:  # noqa: BLE001 - pyarrow raises many kinds
        raise UserError(f"{path}: unreadable parquet ({' '.join(str(e).split())[:200]})") from None


def _episodes_meta(root: Path) -> list[dict[str, Any]]:
    files = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    rows: list[dict[str, Any]] = []
    for f in files:
        t = _read_table(f)
        n = len(next(iter(t.values()))) if t else 0
        rows += [{k: v[i] for k, v in t.items() if not k.startswith("stats/")} for i in range(n)]
    return sorted(rows, key=lambda r: int(r["episode_index"]))


class _VideoFile:
    """Sequential frame reader of one mp4 (re-opened to go back)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cap: Any = None
        self._pos = 0

    def frames(self, start: int, n: int) -> list[np.ndarray]:
        """BGR frames ``start .. start + n - 1`` (fewer if the file ends)."""
        import cv2

        if self._cap is None or start < self._pos:
            if self._cap is not None:
                self._cap.release()
            self._cap = cv2.VideoCapture(str(self.path))
            self._pos = 0
            if not self._cap.isOpened():
                return []
        while self._pos < start:
            if not self._cap.grab():
                return []
            self._pos += 1
        out = []
        for _ in range(n):
            ok, img = self._cap.read()
            if not ok:
                break
            out.append(img)
            self._pos += 1
        return out

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()


def import_lerobot(root: str | Path, out: str | Path, units: str = "degrees",
                   calibration: str | Path | None = None, video: bool = True,
                   progress: Callable[[str], None] | None = None) -> list[str]:
    """Convert an SO-101 LeRobotDataset v3 folder into a new realsim arm log ``out``.

    Per frame: ``observation.state`` -> sensors/qpos (rad, gripper m);
    ``observation.velocity`` (if present, degrees units only) -> sensors/qvel, else
    qvel is the time derivative of qpos (``np.gradient``); ``observation.effort``
    with ``<joint>.load`` names -> sensors/load; ``action`` (goal positions) ->
    command/action normalised over the joint limits; each camera video ->
    camera/<name>/jpeg (JPEG, quality 90). Times: ``timestamp``. Returns the
    episode names written.
    """
    import cv2

    from realsim.logs import LogWriter

    _pyarrow()
    root, out = Path(root), Path(out)
    info = read_info(root)
    if units not in so101.UNITS:
        raise UserError(f"unknown units {units!r}: expected one of {', '.join(so101.UNITS)}")
    cal = so101.load_calibration(calibration) if calibration else None
    if out.exists():
        raise UserError(f"{out}: already exists; import writes a new log (choose another --out)")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: no such folder {out.parent}")
    feats = info["features"]
    for k in ("observation.state", "action"):
        if k not in feats:
            raise UserError(f"{root}: feature {k!r} missing; not an SO-101 arm dataset")
    fps = float(info["fps"])
    order = {k: so101.joint_order(feats[k].get("names"), int(np.prod(feats[k].get("shape", [0]))), k)
             for k in ("observation.state", "action")}
    extra = {}
    for k, suffix in (("observation.velocity", ".vel"), ("observation.effort", ".load")):
        names = [str(n) for n in (feats.get(k, {}).get("names") or [])]
        if k in feats and all(f"{j}{suffix}" in names for j in so101.JOINTS):
            if k == "observation.velocity" and units != "degrees":
                continue
            extra[k] = [names.index(f"{j}{suffix}") for j in so101.JOINTS]
    video_keys = [k for k, f in feats.items() if f.get("dtype") == "video"] if video else []

    # frames of every data file
    data_files = sorted((root / "data").glob("*/*.parquet"))
    if not data_files:
        raise UserError(f"{root}: no data/*/*.parquet files")
    cols = ["observation.state", "action", "timestamp", "frame_index", "episode_index", *extra]
    table: dict[str, list[Any]] = {c: [] for c in cols}
    for f in data_files:
        t = _read_table(f)
        missing = [c for c in cols if c not in t]
        if missing:
            raise UserError(f"{f}: columns {', '.join(missing)} missing")
        for c in cols:
            table[c] += t[c]
    ep_index = np.asarray(table["episode_index"], np.int64)
    arrays = {c: np.asarray(table[c], np.float64) for c in cols if c != "episode_index"}
    meta = {int(r["episode_index"]): r for r in _episodes_meta(root)}
    if video_keys and not meta:
        warn(f"{root}: no meta/episodes parquet; camera videos skipped")
        video_keys = []

    readers: dict[Path, _VideoFile] = {}
    warned: set[str] = set()
    names: list[str] = []
    attrs = {"imported_from": str(root.resolve()), "lerobot_codebase_version": info["codebase_version"],
             "lerobot_robot_type": str(info.get("robot_type")), "lerobot_units": units,
             "lerobot_fps": fps}
    tmp = out.with_name(out.name + ".partial")  # renamed when whole: no half-made log at --out
    tmp.unlink(missing_ok=True)
    try:
        with LogWriter(tmp, robot="arm", source="real", attrs=attrs) as w:
            for e in np.unique(ep_index):
                sel = np.flatnonzero(ep_index == e)
                sel = sel[np.argsort(arrays["frame_index"][sel], kind="stable")]
                t = arrays["timestamp"][sel]  # float32 in the file: exact ticks where they agree
                ticks = arrays["frame_index"][sel] / fps
                if np.all(np.abs(t - ticks) < 1e-4):
                    t = ticks
                # realsim's own exports keep the grid's start (s since episode start)
                t = t + float(meta.get(int(e), {}).get("realsim/t0") or 0.0)
                q = so101.lerobot_to_si(arrays["observation.state"][sel][:, order["observation.state"]],
                                        units, cal)
                goal = so101.lerobot_to_si(arrays["action"][sel][:, order["action"]], units, cal)
                msg = so101.check_range(q, f"{root}: episode {e}")
                if msg and "range" not in warned:
                    warned.add("range")
                    warn(msg)
                fields: dict[str, np.ndarray] = {"qpos": q}
                if "observation.velocity" in extra:
                    v = arrays["observation.velocity"][sel][:, extra["observation.velocity"]]
                    fields["qvel"] = so101.lerobot_rate_to_si(v)
                elif len(t) > 1:
                    fields["qvel"] = np.gradient(q, t, axis=0)
                else:
                    fields["qvel"] = np.zeros_like(q)
                if "observation.effort" in extra:
                    fields["load"] = arrays["observation.effort"][sel][:, extra["observation.effort"]]
                ep = w.begin_episode(driver=f"lerobot:{root.name}", seed=-1,
                                     attrs={"lerobot_episode_index": int(e),
                                            "qvel_source": ("observation.velocity"
                                                            if "observation.velocity" in extra
                                                            else "derivative of qpos")})
                ep.add_commands(t, arrays["frame_index"][sel].astype(np.int64),
                                so101.goal_to_action(goal))
                ep.add_sensor_block(t, None, **fields)
                for key in video_keys:
                    _import_video(ep, root, info, meta.get(int(e)), key, t, fps, readers, warned, cv2)
                ep.close()
                names.append(ep.name)
                if progress:
                    progress(f"{ep.name} <- episode {int(e)} ({len(t)} frames)")
        if not names:
            raise UserError(f"{root}: no frames in data/*/*.parquet")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
        for r in readers.values():
            r.close()
    return names


def _import_video(ep: Any, root: Path, info: dict[str, Any], meta: dict[str, Any] | None,
                  key: str, t: np.ndarray, fps: float, readers: dict[Path, _VideoFile],
                  warned: set[str], cv2: Any) -> None:
    """Frames of episode ``meta`` from video ``key`` into camera/<name> of ``ep``."""
    cam = key.split(".")[-1]
    if meta is None or f"videos/{key}/from_timestamp" not in meta or not info.get("video_path"):
        if key not in warned:
            warned.add(key)
            warn(f"{root}: no video offsets for {key}; camera {cam} skipped")
        return
    path = root / str(info["video_path"]).format(
        video_key=key, chunk_index=int(meta[f"videos/{key}/chunk_index"]),
        file_index=int(meta[f"videos/{key}/file_index"]))
    reader = readers.setdefault(path, _VideoFile(path))
    start = int(math.floor(float(meta[f"videos/{key}/from_timestamp"]) * fps + 0.5))
    frames = reader.frames(start, len(t))
    if len(frames) < len(t) and key not in warned:
        warned.add(key)
        warn(f"{path}: {len(frames)} of {len(t)} frames decoded (codec unsupported by OpenCV, "
              f"e.g. AV1?); camera {cam} is partial or empty")
    for i, img in enumerate(frames):
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        if ok:
            ep.add_frame(cam, float(t[i]), buf.tobytes())
