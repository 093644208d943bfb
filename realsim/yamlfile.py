"""Reading a user's YAML file into a mapping, with one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from realsim.errors import UserError


def load_mapping(path: str | Path, what: str = "a mapping", missing: str = "no such file") -> dict[str, Any]:
    """The YAML mapping in `path` ({} for an empty file).

    UserError (one line, naming the file) when it is missing (`missing: path`), is not
    valid YAML (its first line of explanation), or holds something other than a mapping
    ("expected `what`").
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{missing}: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected {what}")
    return data
