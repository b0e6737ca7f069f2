"""How a package declares its settings: a dataclass whose fields carry their command-line face.

Each stage package keeps its own config beside its code (``decode/config.py``,
``groups/config.py``, ...): typed fields with defaults, and a ``problems()`` method that
checks values and names the flag of each bad one. :mod:`streaming.options` composes them
into the job's options and builds the command line from their fields, so an option is
declared once, in the package that reads it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


class OptionError(ValueError):
    """An option value the job cannot run with; the message names the flag."""


def setting(help: str, *, flag: str | None = None, **argparse_kwargs: Any) -> dict[str, Any]:
    """A field's metadata: its help, its flag if not derived from the field name, argparse extras."""
    return {"help": help, "flag": flag, **argparse_kwargs}


def flag(config: type | object, name: str) -> str:
    """The command-line flag of field ``name`` of a config dataclass."""
    meta = next(f.metadata for f in fields(config) if f.name == name)  # type: ignore[arg-type]
    return meta.get("flag") or "--" + name.replace("_", "-")


class Config:
    """Base of the packages' config dataclasses: checked as they are built, from code or the command line."""

    def problems(self) -> list[str]:
        return []

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise OptionError("; ".join(problems))


def positive(config: Any, *names: str) -> list[str]:
    """Problems for the fields ``names`` that are set and not above zero."""
    return [f"{flag(config, n)} must be positive" for n in names
            if getattr(config, n) is not None and not getattr(config, n) > 0]


def not_negative(config: Any, *names: str) -> list[str]:
    return [f"{flag(config, n)} must not be negative" for n in names if getattr(config, n) < 0]
