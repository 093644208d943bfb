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
