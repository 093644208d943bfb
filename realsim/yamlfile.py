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


def key_values(items: list[str] | tuple[str, ...], option: str = "--set") -> dict[str, Any]:
    """`KEY=VALUE` command-line items as {key: YAML value} (later items win); UserError
    naming `option` for an item without "=" or a key."""
    import yaml

    out: dict[str, Any] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise UserError(f"{option} {it!r}: expected KEY=VALUE")
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError:
            raise UserError(f"{option} {it!r}: the value is not valid YAML") from None
    return out
