"""The pixel-footprint check flags a cone too small to see and passes a visible one."""

from __future__ import annotations

import pytest

from realsim.footprint import FootprintReport, check_footprint, footprint_table


def test_flags_tiny_input() -> None:
    with pytest.warns(UserWarning, match="footprint"):
        rep = check_footprint(16, floor_px=20, n=8)
    assert rep.warn and rep.frac_below == 1.0 and rep.height == 12
    assert "WARN" in rep.row()


def test_passes_near_cone_and_flags_far_one() -> None:
    near, far = footprint_table([160], floor_px=20, n=6, cone_xy=[(1.0, 0.0)])[0], None
    assert not near.warn and near.min >= 20, near.counts
    far = footprint_table([160], floor_px=20, n=6, cone_xy=[(3.0, 0.0)])[0]
    assert far.warn and far.median < near.median
    assert str(near).startswith(FootprintReport.header())
