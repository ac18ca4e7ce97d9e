"""The stratified cohort sampler of §5.1: exact size, determinism, proportionality, its buckets."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from processors.dbpm.cohort import (
    PatientAttributes,
    age_bucket,
    gender_label,
    length_tertile,
    stratified_cohort,
    tertile_cut_points,
)


def population(n: int, seed: int = 1) -> list[PatientAttributes]:
    """A skewed population with missing ages and genders, like the paper's corpus."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        age = None if rng.random() < 0.04 else rng.choice((5, 25, 45, 50, 55, 60, 70))
        gender = rng.choice(("F", "M", "female", "Male", None, "x"))
        out.append(PatientAttributes(f"p{i:05d}", age, gender, rng.randint(200, 6000)))
    return out


@pytest.mark.parametrize("target", [1, 7, 24, 100, 999, 1000])
def test_the_cohort_has_exactly_the_target_size_with_distinct_members(target: int) -> None:
    cohort = stratified_cohort(population(1000), target, seed=42)
    assert len(cohort.ids) == len(set(cohort.ids)) == target
    assert sum(s.allocated for s in cohort.strata) == target
    assert set(cohort.ids) <= {p.patient_id for p in population(1000)}


def test_the_draw_is_a_function_of_population_target_and_seed_not_of_input_order() -> None:
    people = population(800)
    shuffled = people[::-1]
    assert stratified_cohort(people, 200, seed=42) == stratified_cohort(shuffled, 200, seed=42)
    assert stratified_cohort(people, 200, seed=42).ids != stratified_cohort(people, 200, seed=43).ids


def test_allocation_is_the_floor_plus_the_largest_remainder_share_of_the_residual_population() -> None:
    cohort = stratified_cohort(population(3000), 500, seed=42)
    strata = cohort.strata
    assert cohort.floor == min(10, max(1, 500 // (2 * len(strata))))
    assert all(s.floor == min(cohort.floor, s.population) for s in strata)
    residual = 500 - sum(s.floor for s in strata)
    spare = sum(s.population - s.floor for s in strata)
    quotas = {s.key: Fraction(residual * (s.population - s.floor), spare) for s in strata}
    for s in strata:
        share = s.allocated - s.floor
        assert quotas[s.key] - 1 < share < quotas[s.key] + 1  # floor or ceiling of its exact quota
    # Those rounded up have fractional parts no smaller than those rounded down.
    up = [quotas[s.key] % 1 for s in strata if s.allocated - s.floor > quotas[s.key]]
    down = [quotas[s.key] % 1 for s in strata if s.allocated - s.floor < quotas[s.key]]
    assert not up or not down or min(up) >= max(down)


def test_each_member_comes_from_the_stratum_it_was_allocated_to() -> None:
    people = {p.patient_id: p for p in population(2000)}
    cohort = stratified_cohort(people.values(), 300, seed=7)
    drawn: dict[tuple[str, str, str], int] = {}
    for patient_id in cohort.ids:
        p = people[patient_id]
        key = (age_bucket(p.age), gender_label(p.gender), length_tertile(p.document_chars, cohort.cut_points))
        drawn[key] = drawn.get(key, 0) + 1
    assert drawn == {s.key: s.allocated for s in cohort.strata if s.allocated}


def test_missing_or_invalid_ages_and_genders_fall_into_the_unknown_buckets() -> None:
    assert [age_bucket(a) for a in (None, -1, float("nan"), 0, 17.9, 18, 39, 40, 64, 65, 101)] == [
        "unknown", "unknown", "unknown", "0-17", "0-17", "18-39", "18-39", "40-64", "40-64", "65+", "65+",
    ]  # fmt: skip
    assert [gender_label(g) for g in ("F", " female", "m", "Male", None, "", "x", "unknown")] == [
        "F", "F", "M", "M", "unknown", "unknown", "unknown", "unknown",
    ]  # fmt: skip
    people = [PatientAttributes(f"u{i}", None, None, 100 + i) for i in range(30)]
    people += [PatientAttributes(f"k{i}", 50, "F", 100 + i) for i in range(30)]
    cohort = stratified_cohort(people, 12, seed=42)
    assert {s.age_bucket for s in cohort.strata} == {"unknown", "40-64"}
    assert {s.gender for s in cohort.strata} == {"unknown", "F"}


def test_empty_strata_get_no_row_and_rare_strata_keep_their_floor() -> None:
    people = [PatientAttributes(f"a{i}", 50, "M", 1000 + i) for i in range(500)]
    people += [PatientAttributes("rare", 10, "F", 1000)]  # one child: its own stratum
    cohort = stratified_cohort(people, 60, seed=42)
    assert len(cohort.strata) == 4  # 40-64 x M x three tertiles, and the child's
    assert all(s.population > 0 for s in cohort.strata)
    child = next(s for s in cohort.strata if s.age_bucket == "0-17")
    assert child.population == child.allocated == 1 and "rare" in cohort.ids


def test_a_cohort_smaller_than_the_number_of_strata_gives_one_each_to_the_largest() -> None:
    cohort = stratified_cohort(population(1000), 5, seed=42)
    allocated = sorted(cohort.strata, key=lambda s: -s.population)
    assert [s.allocated for s in allocated[:5]] == [1] * 5
    assert all(s.allocated == 0 for s in allocated[5:])


def test_tertile_cut_points_are_nearest_rank_lengths_of_the_whole_population() -> None:
    assert tertile_cut_points(list(range(1, 10))) == (3, 6)
    assert tertile_cut_points([5]) == (5, 5)
    assert [length_tertile(n, (3, 6)) for n in (1, 3, 4, 6, 7)] == ["T1", "T1", "T2", "T2", "T3"]
    with pytest.raises(ValueError, match="at least one"):
        tertile_cut_points([])


def test_bad_input_is_refused_with_the_reason() -> None:
    people = population(10)
    with pytest.raises(ValueError, match=r"outside 1\.\.10"):
        stratified_cohort(people, 11)
    with pytest.raises(ValueError, match="unique"):
        stratified_cohort([*people, people[0]], 3)
    with pytest.raises(ValueError, match=">= 0"):
        stratified_cohort([PatientAttributes("n", 1, "F", -1)], 1)


def test_the_json_carries_strata_allocations_cut_points_and_ids() -> None:
    cohort = stratified_cohort(population(400), 50, seed=42)
    data = cohort.to_json()
    assert data["n_target"] == 50 and data["seed"] == 42 and data["population"] == 400
    assert data["tertile_cut_points"] == list(cohort.cut_points)
    assert sum(s["allocated"] for s in data["strata"]) == len(data["ids"]) == 50
    assert data["n_strata"] == len(data["strata"])
