"""The ``Units`` key of a model file: the unit of time and of named parameters and variables.

Every kind accepts it::

    Units:
      time: d          # the unit of t: the time coordinate, the plots' time axis, derivatives per day
      G: AU^3/(Msun d^2)
      x: AU            # a variable (a coordinate of a Lagrangian, a point of a Mechanism)

A unit is free text (``m``, ``N m``, ``AU``, ``rad/s``): mechsweep carries it
into the outputs' ``units`` attributes and the axis labels, and converts
nothing.  A variable's unit gives its derivatives' (``AU/d``, ``AU/d^2``)
and a parameter's gives the sensitivities' (``[output]/[parameter]``).
Without ``Units`` time is in ``s`` and nothing else carries a unit.
"""

from __future__ import annotations

from typing import Any, Mapping

from solver.models.yamlio import Locator, did_you_mean, require_mapping, require_str

__all__ = ["TIME_KEY", "MAX_UNIT_CHARS", "read_units", "apply_units"]

#: The key of the unit of time.
TIME_KEY = "time"
#: Longest unit text: a unit is a label, not a document.
MAX_UNIT_CHARS = 40


def read_units(data: Any, loc: Locator, names: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """Read ``Units``.

    Args:
        data: the value of ``Units`` (a mapping, or None when absent).
        loc: the file's locator (for messages with a line).
        names: every name a unit may be given to -> what it is
            (``"parameter"`` or ``"variable"``).

    Returns:
        ``(time unit or None, {name: unit})``.

    Raises:
        InputError: not a mapping; a key that is neither ``time`` nor one of
            ``names`` (the valid ones listed); a unit that is not a short,
            single-line, non-empty text.
    """
    units = require_mapping(data, ("Units",), loc, allow_none=True) or {}
    time_unit, out = None, {}
    for key, value in units.items():
        path = ("Units", key)
        if not isinstance(key, str) or (key != TIME_KEY and key not in names):
            valid = [TIME_KEY] + sorted(names)
            hint = did_you_mean(str(key), valid) if isinstance(key, str) else None
            raise loc.error(f"no time, parameter or variable named {key!r}"
                            + (f"; did you mean {hint!r}?" if hint else "")
                            + f"; valid keys: {', '.join(valid)}", path)
        text = require_str(value, path, loc).strip()
        if not text or len(text) > MAX_UNIT_CHARS or not text.isprintable():
            raise loc.error(f"a unit is a short label on one line (1 to {MAX_UNIT_CHARS} printable "
                            f"characters, e.g. m, rad/s, N m), got {value!r}", path)
        if key == TIME_KEY:
            time_unit = text
        else:
            out[key] = text
    return time_unit, out


def apply_units(model, loc: Locator) -> None:
    """Read the model file's ``Units`` and give them to its DAE (``dae.units``, ``dae.time_units``).

    Args:
        model: a :class:`~solver.models.model.Model` just built from its data.
        loc: the file's locator.

    Raises:
        InputError: as :func:`read_units`.
    """
    data = getattr(model, "expanded_data", None) or model.data
    if not isinstance(data, Mapping) or "Units" not in data:
        return
    dae = model.dae
    names = {name: "parameter" for name in dae.param_names}
    names.update({v.name: "variable" for v in dae.variables})
    time_unit, units = read_units(data.get("Units"), loc, names)
    dae.units.update(units)
    if time_unit is not None:
        dae.time_units = time_unit
