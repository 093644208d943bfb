"""realsim/interop: hand realsim logs to other tools, take their data in, show a log.

- `table`: one episode of any log as fixed-rate rows (the control timeline), with
  the robot's state/action vectors named and in the units the other formats use.
- `so101`: the arm's SI units <-> LeRobot's SO-101 convention (degrees, gripper %).
- `lerobot`: `export_lerobot` (LeRobotDataset v3.0: parquet + mp4 + meta/) and
  `import_lerobot` (an SO-101 LeRobotDataset into a realsim arm log).
- `robomimic`: `export_robomimic` (robomimic HDF5: data/demo_N).
- `view`: `render_episode` (PNG of signals against time plus a strip of camera
  frames; HTML page around it; a replay overlaid with ``compare``).
- `cli`: argparse wiring of `realsim export`, `realsim import`, `realsim view`.

Reads logs only through :mod:`realsim.logs`; imports no stage package (sysid,
dynamics, teacher, student, hardware). Privileged data (sim logs) is exported on
purpose: it becomes LeRobot's ``observation.environment_state`` and robomimic's
``states``, where other tools expect simulator state.
"""

from __future__ import annotations
