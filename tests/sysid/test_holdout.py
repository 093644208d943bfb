"""`split_holdout`: which episodes `--holdout` leaves out, by name, base name or full path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from realsim.errors import UserError
from sysid.data import LogEpisode, split_holdout


def _ep(file: str, name: str) -> LogEpisode:
    z = np.zeros(2)
    return LogEpisode(file, name, z, np.zeros((2, 2)), z, {})


def _names(eps: list[LogEpisode]) -> list[str]:
    return [f"{e.file}:{e.name}" for e in eps]


def test_a_full_path_leaves_out_only_that_file(tmp_path: Path) -> None:
    a, b = str(tmp_path / "iter_00" / "steps.h5"), str(tmp_path / "iter_01" / "steps.h5")
    eps = [_ep(a, "ep_000000"), _ep(a, "ep_000001"), _ep(b, "ep_000000"), _ep(b, "ep_000001")]
    train, held = split_holdout(eps, f"{a}:ep_000001")
    assert _names(held) == [f"{a}:ep_000001"]
    assert len(train) == 3
    # a base name means every log of that name (the cycle's iterations share names)
    _, held = split_holdout(eps, "steps.h5:ep_000001")
    assert _names(held) == [f"{a}:ep_000001", f"{b}:ep_000001"]
    # a relative path names the same file as its absolute one
    rel = Path(a).relative_to(Path.cwd()) if Path(a).is_relative_to(Path.cwd()) else Path(a)
    assert _names(split_holdout(eps, f"{rel}:ep_000000")[1]) == [f"{a}:ep_000000"]


def test_an_unknown_path_is_a_user_error(tmp_path: Path) -> None:
    eps = [_ep(str(tmp_path / "x" / "steps.h5"), "ep_000000"), _ep(str(tmp_path / "x" / "steps.h5"), "ep_000001")]
    with pytest.raises(UserError, match="no episode"):
        split_holdout(eps, f"{tmp_path / 'y' / 'steps.h5'}:ep_000000")
