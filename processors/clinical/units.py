"""Unit normalisation with pint before any threshold is applied.

Lab results arrive in UCUM units (``ng/mL``, ``nmol/L``, ``mg/dL``, ``umol/L``, ``meq/L``, ``{INR}``).
Thresholds in the drug maps are written in the units of Supplementary Data 1. This module converts an
observed value into the threshold's unit with pint (a units library, not hand-kept factors):

* UCUM spelling is mapped onto pint's grammar: curly-brace annotations are dropped (``{INR}`` ->
  dimensionless), ``[IU]`` -> ``IU`` (defined here), ``10*3`` -> ``1e3``, ``mm[Hg]`` -> ``mmHg``,
  a leading ``/`` gets a ``1``, ``m2`` -> ``m**2``.
* Mass <-> substance concentration (ng/mL <-> nmol/L, mg/dL <-> mmol/L or umol/L) multiplies by the
  parameter's molar mass as a pint quantity (g/mol), so the dimensions are checked, not assumed.
* Equivalents: ``Eq`` is charge-equivalents; pint has no such unit, so ``mEq`` is rewritten to ``mmol``
  and the value divided by the parameter's valence (K+ 1, Mg2+ 2, Ca2+ 2). This is the one place a
  chemistry fact enters by hand, and it comes from the parameter catalogue, not from code.
* A value whose unit is absent is taken to be in the parameter's canonical unit; the caller records that.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from processors.clinical.exceptions import UnitError

_ANNOTATION = re.compile(r"\{[^}]*\}")
_EQ = re.compile(r"(?<![A-Za-z])([munpk]?)eq(?![A-Za-z])", re.IGNORECASE)


def ucum_to_pint(unit: str) -> str:
    """Rewrite a UCUM unit string into pint's grammar (see module docstring)."""
    text = _ANNOTATION.sub("", unit.strip())
    text = text.replace("[IU]", "IU").replace("[iU]", "IU").replace("mm[Hg]", "mmHg")
    text = text.replace("10*", "1e").replace("10^", "1e")
    text = re.sub(r"(?<=[A-Za-z])2(?![0-9])", "**2", text) if "m2" in text else text
    if text.startswith("/"):
        text = "1" + text
    text = text.strip().strip("/")
    return text or "dimensionless"


class UnitConverter:
    """Converts measured values to a target unit; holds one pint registry (built once, then reused)."""

    def __init__(self) -> None:
        import pint

        self._ureg = pint.UnitRegistry(cache_folder=None)
        self._ureg.define("IU = [international_unit]")
        self._ureg.define("international_unit_per_liter = IU / liter")

    def _quantity(self, value: float, unit: str, valence: int | None) -> Any:
        text = ucum_to_pint(unit)
        if _EQ.search(text):
            if not valence:
                raise UnitError(f"unit {unit!r} is in equivalents but the parameter has no valence")
            text = _EQ.sub(lambda m: f"{m.group(1)}mol", text)
            value = value / valence
        try:
            return self._ureg.Quantity(value, self._parse(text))
        except Exception as exc:  # pint raises several unrelated types for bad input
            raise UnitError(f"unit {unit!r} is not understood ({type(exc).__name__})") from exc

    @lru_cache(maxsize=512)  # noqa: B019 - the converter lives as long as the knowledge base
    def _parse(self, text: str) -> Any:
        return self._ureg.parse_units(text)

    def convert(
        self,
        value: float,
        unit: str | None,
        target: str,
        *,
        molar_mass: float | None = None,
        valence: int | None = None,
    ) -> float:
        """Convert ``value`` in ``unit`` to ``target``.

        Args:
            value: measured value.
            unit: UCUM unit of the measurement; ``None`` means "already in ``target``".
            target: unit of the threshold / parameter.
            molar_mass: g/mol, allows mass <-> substance concentration conversion.
            valence: charge per ion, allows equivalents <-> moles.

        Returns:
            The value expressed in ``target``.

        Raises:
            UnitError: when a unit is not understood or the dimensions cannot be reconciled.
        """
        if unit is None or not unit.strip():
            return float(value)
        factor = self._factor(unit.strip(), target, molar_mass, valence)
        if isinstance(factor, str):
            raise UnitError(factor)
        return float(value) * factor

    @lru_cache(maxsize=1024)  # noqa: B019 - the converter lives as long as the knowledge base
    def _factor(self, unit: str, target: str, molar_mass: float | None, valence: int | None) -> float | str:
        """The factor from ``unit`` to ``target``, or why there is none. A failure is cached as its reason
        like a factor is: ``lru_cache`` keeps no exception, and pint takes milliseconds to fail, which
        every observation in a unit of another parameter would pay again (:meth:`compatible`)."""
        try:
            return self._conversion(unit, target, molar_mass, valence)
        except UnitError as error:
            return str(error)

    def _conversion(self, unit: str, target: str, molar_mass: float | None, valence: int | None) -> float:
        # Every clinical unit here is linear through zero, so a conversion is one cached factor.
        source = self._quantity(1.0, unit, valence)
        dest = self._quantity(1.0, target, valence)
        try:
            return float(source.to(dest.units).magnitude) / dest.magnitude
        except Exception:
            if molar_mass is None:
                raise UnitError(f"cannot convert {unit!r} to {target!r}") from None
        mm = self._ureg.Quantity(molar_mass, "g/mol")
        for candidate in (source * mm, source / mm):
            try:
                return float(candidate.to(dest.units).magnitude) / dest.magnitude
            except Exception:
                continue
        raise UnitError(f"cannot convert {unit!r} to {target!r} even with molar mass {molar_mass} g/mol")

    def compatible(
        self, unit: str | None, target: str, *, molar_mass: float | None, valence: int | None
    ) -> bool:
        """Whether ``unit`` can be converted to ``target`` (absent units are compatible)."""
        try:
            self.convert(1.0, unit, target, molar_mass=molar_mass, valence=valence)
        except UnitError:
            return False
        return True
