"""The stratified evaluation cohort of the DBPM paper (§5.1): who the paired ablation arms run on.

The paper draws its held-out cohort once from the full corpus and reuses it in every arm, so an
ON-versus-OFF comparison is patient-aligned. :func:`stratified_cohort` is that draw, a pure function
of the population, the target size and the seed:

* **Strata** are age bucket x gender x document-length tertile. Age buckets are 0-17, 18-39, 40-64,
  65+ and ``unknown`` (age missing, negative or not finite; a fractional age counts by its whole
  years). Gender is ``F``, ``M`` or ``unknown``: a value whose first letter, after stripping, is F or
  M (any case: ``F``, ``female``, ``m``, ``Male``) is that letter, anything else or nothing is
  ``unknown``. Tertiles are ``T1`` (length <= c1), ``T2`` (c1 < length <= c2) and ``T3``
  (length > c2), with the cut points c1, c2 computed from the *whole population* (not the cohort):
  the nearest-rank 1/3 and 2/3 quantiles of the document lengths, i.e. the smallest length with at
  least a third (two thirds) of the population at or below it. Cut points are therefore actual
  document lengths, like the paper's "T1 <= 1,931 characters < T2 <= 3,121 characters < T3".
  Only non-empty strata exist; an empty cell of the grid gets no row and no allocation.
* **Floor.** Each of the ``S`` non-empty strata first receives ``min(10, max(1, N // (2 S)))``
  patients (the paper's ``min(10, max(1, n_target / (2 n_strata)))``, its integer part, since it
  counts patients), capped by the stratum's population, so rare strata stay visible. When these
  floors alone exceed ``N`` (a cohort smaller than the number of strata), floors of one patient go
  to the most populous strata first (ties: stratum order, below) until ``N`` is reached and the other
  strata get none; the paper's cohort never meets this case.
* **Residual.** The rest, ``R = N - sum(floors)``, is distributed proportionally to each stratum's
  residual population above its floor: stratum ``s`` has the exact quota ``R * r_s / sum(r)``
  (rational arithmetic, no float rounding) and first gets its integer part. The paper assigns "the
  rounding remainders to the largest-deficit strata so the total reaches exactly n_target": the
  deficit of a stratum is its quota minus what it got, i.e. the fractional part of its quota, so
  the remaining patients go one each to the strata with the largest fractional parts (the
  largest-remainder method). Ties, which the paper does not break, are broken by the larger residual
  population, then by stratum order. No stratum can be given more than its population: a quota is
  at most the stratum's residual population, and a fractional quota rounds up to at most it.
* **Selection** is uniform random without replacement within each stratum, with one
  ``random.Random(seed)`` (the paper's is ``random.Random(42)``) drawing the strata in stratum order
  from each stratum's ids sorted in code-point order, so the result does not depend on the order
  the population is given in. The same generator then shuffles the final id list, which is the
  processing order ("shuffled to randomise processing order").

Stratum order is age bucket (0-17, 18-39, 40-64, 65+, unknown), then gender (F, M, unknown), then
tertile (T1, T2, T3). :class:`Cohort` serialises to the fields of the paper's released
``ablation_5k_uids.json``: the strata with their allocations, the tertile cut points and the ids.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

AGE_BUCKETS: tuple[str, ...] = ("0-17", "18-39", "40-64", "65+", "unknown")
GENDERS: tuple[str, ...] = ("F", "M", "unknown")
TERTILES: tuple[str, ...] = ("T1", "T2", "T3")
FLOOR_CAP = 10
"""The floor allocation never exceeds ten patients per stratum (§5.1)."""

UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PatientAttributes:
    """What the sampler knows of one patient of the population.

    Attributes:
        patient_id: the patient's identifier (unique in the population).
        age: age in years, or ``None`` when missing.
        gender: the recorded gender as given (normalised by :func:`gender_label`), or ``None``.
        document_chars: length of the patient's narrative in characters (>= 0).
    """

    patient_id: str
    age: float | None
    gender: str | None
    document_chars: int


StratumKey = tuple[str, str, str]
"""(age bucket, gender, length tertile)."""


def age_bucket(age: float | None) -> str:
    """The age bucket of an age in years (module docstring); ``unknown`` when missing or invalid."""
    if age is None or not math.isfinite(age) or age < 0:
        return UNKNOWN
    years = int(age)
    if years <= 17:
        return "0-17"
    if years <= 39:
        return "18-39"
    if years <= 64:
        return "40-64"
    return "65+"


def gender_label(gender: str | None) -> str:
    """``F``, ``M`` or ``unknown`` (module docstring)."""
    initial = (gender or "").strip()[:1].upper()
    return initial if initial in ("F", "M") else UNKNOWN


def tertile_cut_points(lengths: Sequence[int]) -> tuple[int, int]:
    """The nearest-rank 1/3 and 2/3 quantiles of ``lengths`` (module docstring).

    Raises:
        ValueError: ``lengths`` is empty.
    """
    if not lengths:
        raise ValueError("tertile cut points need at least one document length")
    ordered = sorted(lengths)
    n = len(ordered)
    # Exact rationals: ceil(n / 3) and ceil(2n / 3) are the nearest ranks of the two quantiles.
    return ordered[-(-n // 3) - 1], ordered[-(-2 * n // 3) - 1]


def length_tertile(chars: int, cut_points: tuple[int, int]) -> str:
    """``T1`` (<= c1), ``T2`` (<= c2) or ``T3``."""
    low, high = cut_points
    if chars <= low:
        return "T1"
    return "T2" if chars <= high else "T3"


def _order(key: StratumKey) -> tuple[int, int, int]:
    return AGE_BUCKETS.index(key[0]), GENDERS.index(key[1]), TERTILES.index(key[2])


@dataclass(frozen=True, slots=True)
class StratumAllocation:
    """One non-empty stratum: its population, its floor and the patients drawn from it."""

    age_bucket: str
    gender: str
    length_tertile: str
    population: int
    floor: int
    allocated: int

    @property
    def key(self) -> StratumKey:
        """(age bucket, gender, length tertile)."""
        return self.age_bucket, self.gender, self.length_tertile

    def to_json(self) -> dict[str, Any]:
        """A JSON object of every field."""
        return {
            "age_bucket": self.age_bucket,
            "gender": self.gender,
            "length_tertile": self.length_tertile,
            "population": self.population,
            "floor": self.floor,
            "allocated": self.allocated,
        }


@dataclass(frozen=True, slots=True)
class Cohort:
    """A stratified cohort: the ids in processing order, how they were allocated, and why.

    Attributes:
        seed: the seed of the draw.
        target: the cohort size asked for (``len(ids)``).
        population: the population size drawn from.
        cut_points: the tertile cut points (c1, c2) of the population's document lengths.
        floor: the per-stratum floor before the population cap.
        strata: every non-empty stratum, in stratum order.
        ids: the cohort's patient ids, shuffled (the processing order).
    """

    seed: int
    target: int
    population: int
    cut_points: tuple[int, int]
    floor: int
    strata: tuple[StratumAllocation, ...]
    ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The fields of the paper's ``ablation_5k_uids.json``: strata, allocations, cut points, ids."""
        return {
            "seed": self.seed,
            "n_target": self.target,
            "population": self.population,
            "n_strata": len(self.strata),
            "floor": self.floor,
            "tertile_cut_points": list(self.cut_points),
            "strata": [s.to_json() for s in self.strata],
            "ids": list(self.ids),
        }


def _floors(sizes: Mapping[StratumKey, int], target: int) -> tuple[int, dict[StratumKey, int]]:
    """The per-stratum floor and each stratum's floor allocation (module docstring, "Floor")."""
    floor = min(FLOOR_CAP, max(1, target // (2 * len(sizes))))
    floors = {key: min(floor, size) for key, size in sizes.items()}
    if sum(floors.values()) <= target:
        return floor, floors
    by_size = sorted(sizes, key=lambda key: (-sizes[key], _order(key)))
    return floor, {key: (1 if rank < target else 0) for rank, key in enumerate(by_size)}


def _residual(
    sizes: Mapping[StratumKey, int], floors: Mapping[StratumKey, int], residual: int
) -> dict[StratumKey, int]:
    """Largest-remainder apportionment of ``residual`` over the residual populations."""
    spare = {key: sizes[key] - floors[key] for key in sizes}
    total = sum(spare.values())
    if residual == 0 or total == 0:
        return dict.fromkeys(sizes, 0)
    quotas = {key: Fraction(residual * spare[key], total) for key in sizes}
    shares = {key: math.floor(quota) for key, quota in quotas.items()}
    by_deficit = sorted(sizes, key=lambda key: (-(quotas[key] - shares[key]), -spare[key], _order(key)))
    for key in by_deficit[: residual - sum(shares.values())]:
        shares[key] += 1
    return shares


def stratified_cohort(patients: Iterable[PatientAttributes], target: int, seed: int = 42) -> Cohort:
    """Draw the stratified cohort of §5.1 (module docstring: strata, floor, residual, selection).

    Args:
        patients: the whole population, in any order; ids must be unique.
        target: the cohort size, ``1 <= target <= len(population)``.
        seed: seeds the one random generator of the draw.

    Returns:
        The cohort: exactly ``target`` distinct ids, and the allocation table.

    Raises:
        ValueError: duplicate ids, a negative document length, or a target outside the population.
    """
    population = list(patients)
    ids = [p.patient_id for p in population]
    if len(set(ids)) != len(ids):
        raise ValueError("patient ids must be unique in the population")
    if any(p.document_chars < 0 for p in population):
        raise ValueError("document lengths must be >= 0")
    if not 1 <= target <= len(population):
        raise ValueError(f"cohort size {target} outside 1..{len(population)} (the population)")
    cut_points = tertile_cut_points([p.document_chars for p in population])
    members: dict[StratumKey, list[str]] = {}
    for p in population:
        key = (age_bucket(p.age), gender_label(p.gender), length_tertile(p.document_chars, cut_points))
        members.setdefault(key, []).append(p.patient_id)
    keys = sorted(members, key=_order)
    sizes = {key: len(members[key]) for key in keys}
    floor, floors = _floors(sizes, target)
    shares = _residual(sizes, floors, target - sum(floors.values()))
    rng = random.Random(seed)
    chosen: list[str] = []
    strata = []
    for key in keys:
        allocated = floors[key] + shares[key]
        chosen += rng.sample(sorted(members[key]), allocated)
        strata.append(StratumAllocation(*key, sizes[key], floors[key], allocated))
    rng.shuffle(chosen)
    return Cohort(seed, target, len(population), cut_points, floor, tuple(strata), tuple(chosen))
