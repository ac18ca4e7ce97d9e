"""Hypothesis strategies for every registered event model, derived from the model's fields.

Derivation is generic so that a new schema and model are covered without writing a strategy: each
field's annotation gives the strategy (nested models recursively, optional fields sometimes ``None``,
enums by member, ``int`` within its ``Field(ge=..., le=...)`` bounds or the Avro ``long`` range,
:data:`~schemas.base.EventTime` as zone-aware datetimes, :data:`~schemas.base.JsonText` as JSON
documents, strings mixed with the field's declared ``examples``).

Cross-field rules that a model enforces with a validator (a payload matching its task) would make
random drafts mostly invalid; :data:`FIXUPS` repairs a draft for such models before validation, keyed by
Avro full name (a nested record's full name for a nested model, e.g. ``clingate.docs.DocumentBundle``).
Drafts that are still invalid are rejected; if a new model's validator rejects too much,
hypothesis's health check fails and the model needs a fixup here.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from hypothesis import strategies as st
from pydantic import AfterValidator, AwareDatetime, BaseModel, ValidationError
from pydantic.fields import FieldInfo

from schemas.base import JsonText

INT64 = (-(2**63), 2**63 - 1)

_JSON_VALIDATORS = {m.func for m in get_args(JsonText)[1:] if isinstance(m, AfterValidator)}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(*INT64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=4)

event_times = st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))])
)


def _text(examples: list[Any] | None) -> st.SearchStrategy[str]:
    return st.sampled_from(examples) | st.text() if examples else st.text()


def _int(metadata: list[Any]) -> st.SearchStrategy[int]:
    low, high = INT64
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = max(low, int(item.ge))
        elif isinstance(item, annotated_types.Gt):
            low = max(low, int(item.gt) + 1)
        elif isinstance(item, annotated_types.Le):
            high = min(high, int(item.le))
        elif isinstance(item, annotated_types.Lt):
            high = min(high, int(item.lt) - 1)
    return st.integers(low, high)


def for_type(tp: Any, metadata: list[Any], examples: list[Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy for values of annotation ``tp`` with pydantic ``metadata`` (constraints, validators)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extra = get_args(tp)
        return for_type(base, [*metadata, *extra], examples)
    if origin in (Union, types.UnionType):
        return st.one_of([for_type(arg, metadata, examples) for arg in get_args(tp)])
    if tp is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin is tuple:
        item, _ellipsis = get_args(tp)
        return st.lists(for_type(item, [], None), max_size=3).map(tuple)
    if origin is list:
        return st.lists(for_type(get_args(tp)[0], [], None), max_size=3)
    if origin is dict:
        _key, value = get_args(tp)
        return st.dictionaries(st.text(), for_type(value, [], None), max_size=3)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return st.deferred(lambda: model_strategy(tp))
    if tp is bool:
        return st.booleans()
    if tp is int:
        return _int(metadata)
    if tp is float:
        return st.floats(allow_nan=False)
    if tp is bytes:
        return st.binary(max_size=64)
    if tp in (datetime, AwareDatetime):
        return event_times
    if tp is str:
        if any(isinstance(m, AfterValidator) and m.func in _JSON_VALIDATORS for m in metadata):
            return json_values.map(json.dumps)
        return _text(examples)
    raise NotImplementedError(f"no strategy for {tp!r}: extend tests/unit/schemas/model_strategies.py")


def _field(info: FieldInfo) -> st.SearchStrategy[Any]:
    return for_type(info.annotation, list(info.metadata), info.examples)


# ---------------------------------------------------------------------------------------- fixups


def _payload_task(draft: dict[str, Any]) -> dict[str, Any]:
    from schemas.dbpm import GATED_TASKS, PAYLOAD_BY_TASK, JsonPayload

    payload = draft["payload"]
    if not isinstance(payload, JsonPayload):
        return {**draft, "task": next(t for t, cls in PAYLOAD_BY_TASK.items() if isinstance(payload, cls))}
    if draft["task"] in GATED_TASKS:
        return {**draft, "task": f"{draft['task']}-free-text"}
    return draft


def _decision_repeats_candidate(draft: dict[str, Any]) -> dict[str, Any]:
    candidate = draft["candidate"]
    return {**draft, **{k: getattr(candidate, k) for k in ("ts", "task", "patient_id", "candidate_id")}}


def _fhir_resource_type(draft: dict[str, Any]) -> dict[str, Any]:
    document = json.loads(draft["resource"])
    resource = document if isinstance(document, dict) else {"value": document}
    return {**draft, "resource": json.dumps({**resource, "resourceType": draft["resource_type"]})}


def _bundle_pages_numbered(draft: dict[str, Any]) -> dict[str, Any]:
    pages = [page.model_copy(update={"page_num": n}) for n, page in enumerate(draft["pages"], start=1)]
    return {**draft, "pages": pages, "total_pages": len(pages)}


FIXUPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "clingate.dbpm.Candidate": _payload_task,
    "clingate.dbpm.Verdict": _payload_task,
    "clingate.dbpm.GateDecision": _decision_repeats_candidate,
    "clingate.fhir.FhirUpdate": _fhir_resource_type,
    "clingate.docs.DocumentBundle": _bundle_pages_numbered,
}


_CACHE: dict[type[BaseModel], st.SearchStrategy[Any]] = {}


def _avro_full_name(model: type[BaseModel]) -> str:
    """An event model's ``avro_name``; for a nested model, its record's name in its module's area."""
    area = model.__module__.rsplit(".", 1)[-1]
    return getattr(model, "avro_name", f"clingate.{area}.{model.__name__}")


def model_strategy(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Valid instances of ``model`` (an event model or a plain nested one), derived from its fields.

    Drafts are keyed by alias where a field has one (validation by alias always works).
    """
    if model not in _CACHE:
        fixup = FIXUPS.get(_avro_full_name(model), lambda draft: draft)

        def build(draft: dict[str, Any]) -> BaseModel | None:
            try:
                return model.model_validate(fixup(draft))
            except ValidationError:
                return None

        drafts = st.fixed_dictionaries(
            {info.alias or name: _field(info) for name, info in model.model_fields.items()}
        )
        _CACHE[model] = drafts.map(build).filter(lambda instance: instance is not None)
    return _CACHE[model]
