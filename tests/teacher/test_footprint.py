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


def test_a_band_of_rows_keeps_the_cone_at_the_same_scale() -> None:
    full, band = footprint_table([160, (160, (32, 152))], floor_px=8, n=4, cone_xy=[(2.0, 0.3)])
    assert (full.height, band.height) == (120, 60) and band.rows_label == "32-152"
    assert list(band.counts) == list(full.counts) and band.min > 0


def test_arm_cube_and_square_footprints_shrink_with_the_input() -> None:
    """The arm path: the red cube and the green square in the front camera at the start."""
    cube = footprint_table([32, 80], floor_px=8, n=3, robot="arm", subject="cube")
    square = footprint_table([80], floor_px=8, n=3, robot="arm", subject="target")[0]
    assert (cube[1].width, cube[1].height, cube[1].rows_label) == (80, 60, "0-480")
    assert cube[0].warn and not cube[1].warn and cube[1].min > 4 * cube[0].median
    assert square.min > cube[1].median  # the 8 cm square is bigger than the 3 cm cube
    assert cube[1].subject == "cube" and square.subject == "target"
    with pytest.warns(UserWarning, match="cube footprint"):
        check_footprint(16, floor_px=8, n=2, robot="arm")
