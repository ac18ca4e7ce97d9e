"""Phase 0: age, staleness classes and age_days, overall class, banner, datetime sanitisation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from clinical_builders import AS_OF, lab, med, mini_bundle, state_from
from hypothesis import given
from hypothesis import strategies as st

from processors.clinical.assess import assess
from processors.clinical.fhir_input import parse_document
from processors.clinical.phase0 import CLASS_ORDER, patient_age, staleness_class, worst
from processors.clinical.sanitise import sanitise_datetimes


def test_age_counts_whole_years_at_the_as_of_date():
    assert patient_age("1943-06-20", AS_OF) == 82
    assert patient_age("1943-03-29", AS_OF) == 83
    assert patient_age("1943-03-30", AS_OF) == 82
    assert patient_age(None, AS_OF) is None


def test_leap_day_birthday_counts_on_first_of_march():
    assert patient_age("2000-02-29", datetime(2025, 2, 28, tzinfo=UTC)) == 24
    assert patient_age("2000-02-29", datetime(2025, 3, 1, tzinfo=UTC)) == 25


def test_partial_birth_date_completes_to_start_of_period():
    assert patient_age("1950", AS_OF) == 76
    assert patient_age("1950-07", AS_OF) == 75


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [
        (timedelta(hours=48), "CURRENT"),
        (timedelta(hours=48, seconds=1), "RECENT"),
        (timedelta(days=7), "RECENT"),
        (timedelta(days=7, seconds=1), "STALE"),
        (timedelta(days=30), "STALE"),
        (timedelta(days=30, seconds=1), "PROFOUNDLY_STALE"),
        (timedelta(hours=-3), "CURRENT"),
    ],
)
def test_staleness_classes_use_exact_elapsed_time(elapsed, expected):
    assert staleness_class(AS_OF - elapsed, AS_OF) == expected


@given(
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)),
)
def test_staleness_class_never_improves_with_age(a, b):
    older, newer = max(a, b), min(a, b)
    assert CLASS_ORDER.index(staleness_class(AS_OF - older, AS_OF)) >= CLASS_ORDER.index(
        staleness_class(AS_OF - newer, AS_OF)
    )


def test_age_days_are_utc_calendar_days_while_class_uses_elapsed_time(knowledge):
    as_of = datetime(2026, 3, 29, 0, 1, tzinfo=UTC)
    state = state_from(
        mini_bundle("p", [lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T23:59:00Z")])
    )
    obs = assess(state, as_of, None, knowledge).staleness.observations[0]
    assert (obs.age_days, obs.class_) == (1, "CURRENT")
    state = state_from(
        mini_bundle("p", [lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-26T23:00:00+05:00")])
    )
    obs = assess(state, as_of, None, knowledge).staleness.observations[0]
    assert obs.effective == "2026-03-26T18:00:00Z"
    assert (obs.age_days, obs.class_) == (3, "RECENT")


def test_overall_is_the_worst_class_and_missing_does_not_count(knowledge):
    state = state_from(
        mini_bundle(
            "p",
            [
                med("digoxin 0.125 mg daily"),
                lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T08:00:00Z"),
                lab("2160-0", "Creatinine", 1.0, "mg/dL", when="2026-03-20T08:00:00Z"),
            ],
        )
    )
    staleness = assess(state, AS_OF, None, knowledge).staleness
    assert staleness.overall == "STALE"
    missing = {o.parameter for o in staleness.observations if o.class_ == "MISSING"}
    assert missing == {"digoxin_level", "magnesium"}


def test_latest_result_of_a_test_supersedes_older_ones(knowledge):
    state = state_from(
        mini_bundle(
            "p",
            [
                lab("2823-3", "Potassium", 3.0, "mmol/L", when="2025-01-01T08:00:00Z"),
                lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T08:00:00Z"),
            ],
        )
    )
    staleness = assess(state, AS_OF, None, knowledge).staleness
    assert [(o.code, o.class_) for o in staleness.observations] == [("2823-3", "CURRENT")]


def test_no_observations_gives_missing_overall_and_a_banner_without_dates(knowledge):
    staleness = assess(state_from(mini_bundle("p", [])), AS_OF, None, knowledge).staleness
    assert staleness.overall == "MISSING"
    assert "Labs dated none" in staleness.banner and "Lab gap: n/a" in staleness.banner


def test_current_banner_says_within_threshold(knowledge):
    state = state_from(
        mini_bundle("p", [lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T08:00:00Z")])
    )
    banner = assess(state, AS_OF, None, knowledge).staleness.banner
    assert banner.splitlines()[0] == "PHASE 0 DATA READINESS: CURRENT"
    assert banner.splitlines()[-1] == "WITHIN 48-hour threshold."


def test_worst_ignores_missing():
    assert worst(["MISSING", "RECENT", "CURRENT"]) == "RECENT"
    assert worst(["MISSING"]) is None


def test_sanitiser_strips_leaked_annotations_and_keeps_estimated_flag():
    clean, issues = sanitise_datetimes(
        {
            "resourceType": "Observation",
            "effectiveDateTime": "2026-03-03T08:00:00Z [STALE: 26 days]",
            "issued": "2026-03-03T09:00:00Z [ESTIMATED]",
            "valueString": "2026-03-03 [not a datetime field]",
        }
    )
    assert clean["effectiveDateTime"] == "2026-03-03T08:00:00Z"
    assert clean["issued"] == "2026-03-03T09:00:00Z"
    assert clean["valueString"] == "2026-03-03 [not a datetime field]"
    assert any("ESC-014" in i for i in issues) and any("ESTIMATED" in i for i in issues)


def test_sanitised_annotation_is_reported_in_the_assessment_issues(knowledge):
    observation = lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T08:00:00Z (48h ago)")
    result = assess(state_from(mini_bundle("p", [observation])), AS_OF, None, knowledge)
    assert result.staleness.observations[0].effective == "2026-03-28T08:00:00Z"
    assert any("ESC-014" in i for i in result.issues)


def test_datetime_without_iso_token_is_invalid_and_reported():
    bad = lab("2823-3", "Potassium", 4.0, "mmol/L", when="three days ago")
    parsed = parse_document(mini_bundle("p", [bad]))
    assert [(i.resource_type, i.resource_id) for i in parsed.invalid] == [("Observation", "r000")]
    assert "effectiveDateTime" in parsed.invalid[0].error


@given(
    st.integers(min_value=-2_000_000_000, max_value=4_000_000_000).map(
        lambda s: datetime.fromtimestamp(s, UTC)
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
)
def test_sanitiser_always_leaves_the_iso_token_alone(moment, suffix):
    iso = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    clean, _ = sanitise_datetimes({"effectiveDateTime": f"{iso} {suffix}"})
    assert clean["effectiveDateTime"] == iso


def test_as_of_in_another_zone_counts_utc_calendar_days(knowledge):
    state = state_from(
        mini_bundle("p", [lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-28T20:00:00Z")])
    )
    tokyo = datetime(2026, 3, 29, 8, 0, tzinfo=timezone(timedelta(hours=9)))  # 2026-03-28T23:00Z
    result = assess(state, tokyo, None, knowledge)
    assert result.as_of == "2026-03-28T23:00:00Z"
    assert result.staleness.observations[0].age_days == 0


def test_future_dated_observation_is_current_and_reported(knowledge):
    state = state_from(
        mini_bundle("p", [lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-30T08:00:00Z")])
    )
    result = assess(state, AS_OF, None, knowledge)
    assert result.staleness.observations[0].class_ == "CURRENT"
    assert any("after the as-of instant" in i for i in result.issues)
