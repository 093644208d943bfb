"""Student config values: typed by their field, whatever way YAML spelled them."""

from __future__ import annotations

import pytest

from realsim.errors import UserError
from realsim.yamlfile import key_values
from student.config import StudentConfig
from tests.conftest import assert_one_line_error, run_cli


def test_set_values_take_their_fields_types() -> None:
    # YAML 1.1 reads 3e-4 (no dot) as a string: it once reached the optimiser as text
    over = key_values(["lr=3e-4", "epochs=4", "eval_action_noise=0", "keep_all=true"])
    assert over["lr"] == "3e-4"
    cfg = StudentConfig.for_robot("arm", **over)
    assert isinstance(cfg.lr, float) and cfg.lr == pytest.approx(3e-4)
    assert isinstance(cfg.eval_action_noise, float) and cfg.eval_action_noise == 0.0
    assert cfg.epochs == 4 and isinstance(cfg.epochs, int)
    assert cfg.keep_all is True
    # a checkpoint's own dict comes back unchanged
    assert StudentConfig.from_dict(cfg.as_dict()) == cfg


@pytest.mark.parametrize("bad", [{"lr": "fast"}, {"epochs": 2.5}, {"epochs": "ten"},
                                 {"keep_all": "yes please"}, {"lr": True}])
def test_values_of_the_wrong_kind_are_user_errors(bad: dict) -> None:
    key = next(iter(bad))
    with pytest.raises(UserError, match=f"config: {key} must be of type"):
        StudentConfig.for_robot("rc_car", **bad)


def test_cli_names_the_mistyped_key(tmp_path) -> None:
    data = tmp_path / "d.h5"
    data.write_bytes(b"")  # exists: the config is read before the data's contents
    p = run_cli("train-student", "rc_car", "--data", str(data), "--out",
                str(tmp_path / "o.pt"), "--set", "lr=fast")
    assert_one_line_error(p, "lr must be of type float")
    assert not (tmp_path / "o.pt").exists()
