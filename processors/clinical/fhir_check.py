"""A cheap sufficient test that ``fhir.resources`` accepts a resource, derived from its own models.

Building the pydantic FHIR model of a resource runs Python validators at every nested element; the
clinical edge keeps nothing of the model but the verdict. :func:`accepts` walks the resource's JSON
alongside the model's fields instead and answers True only where the model's validation would pass:

* every key is a field's alias, every value is not None, every list and object is non-empty;
* a complex element (a field typed with another FHIR model) is an object checked the same way against
  that model, each item of a list of them too;
* a primitive value passes the pydantic validator of its field's own annotation (a
  :class:`pydantic.TypeAdapter` of it: the very checks the model runs on that field);
* the model's required fields (pydantic's and FHIR's ``element_required``) are present, and at most
  one field of each choice ``nnn[x]`` (exactly one where the choice is required);
* the model declares no validators beyond :class:`~fhir_core.fhirabstractmodel.FHIRAbstractModel`'s
  two (nulls in complex lists, required primitives and choices, all covered above).

Anything else (a ``_field`` primitive extension, ``contained`` resources, ``fhir_comments``, a model
with validators of its own, a value the field's validator refuses) answers False: "not shown", not
"invalid". The caller then validates with the model itself, so every rejection and its message are the
library's.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any

from pydantic import TypeAdapter

#: The model validators every FHIR model inherits; what they check is checked here.
_BASE_VALIDATORS = frozenset({"reject_null_complex_elements", "validate_after_model_construction"})


@dataclass(frozen=True)
class _Field:
    complex: _Shape | None
    """The shape of a complex element's model; None for a primitive."""
    primitive: TypeAdapter[Any] | None
    """The validator of a primitive field's annotation."""
    is_list: bool


@dataclass(frozen=True)
class _Shape:
    resource_type: str
    fields: dict[str, _Field]
    """By alias (the JSON key)."""
    required: frozenset[str]
    choices: tuple[tuple[frozenset[str], bool], ...]
    """Each choice's aliases and whether one of them is required."""


def _unwrap(annotation: Any) -> tuple[Any, bool] | None:
    """The element type of an optional / list annotation and whether it is a list; None: not one type."""
    if typing.get_origin(annotation) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(annotation) if a is not NoneType]
        if len(args) != 1:
            return None
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return item, True
    return annotation, False


def _complex_model(annotation: Any) -> Any:
    """The FHIR model a complex element's annotation stands for (None: a primitive)."""
    get = getattr(annotation, "get_model_klass", None)
    return get() if callable(get) else None


_SHAPES: dict[Any, _Shape | None] = {}
"""The shapes made so far, by model. A model's shape is registered before its fields are filled (FHIR
elements nest recursively, as Extension in Extension); one seen meanwhile lacks fields, which only makes
:func:`accepts` answer False more often."""


def _shape(model: Any) -> _Shape | None:
    """The shape of ``model`` (None: it is not one :func:`accepts` can vouch for)."""
    from fhir_core.fhirabstractmodel import FHIRAbstractModel

    if model in _SHAPES:
        return _SHAPES[model]
    _SHAPES[model] = None
    if not (isinstance(model, type) and issubclass(model, FHIRAbstractModel)):
        return None
    decorators = model.__pydantic_decorators__
    if set(decorators.model_validators) != _BASE_VALIDATORS or decorators.field_validators:
        return None
    if model.model_config.get("extra") != "forbid" or model.__resource_type__ == "Resource":
        return None  # Resource stands for any resource type (contained): its type is in the data
    by_name = {name: info.alias or name for name, info in model.model_fields.items()}
    blank = model.model_construct()
    required = {by_name[name] for name, info in model.model_fields.items() if info.is_required()}
    required |= {by_name[name] for name, _ in blank.get_required_fields()}
    choices = tuple(
        (
            frozenset(by_name[n] for n in names),
            model.model_fields[names[0]].json_schema_extra["one_of_many_required"] is True,
        )
        for names in blank.get_one_of_many_fields().values()
    )
    shape = _SHAPES[model] = _Shape(model.__resource_type__, {}, frozenset(required), choices)
    for name, info in model.model_fields.items():
        alias = by_name[name]
        unwrapped = _unwrap(info.annotation)
        if name == "fhir_comments" or alias.startswith("_") or unwrapped is None:
            continue  # a primitive's extension, comments, a union of types: not vouched for
        element, is_list = unwrapped
        target = _complex_model(element)
        if target is None:
            annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
            shape.fields[alias] = _Field(None, TypeAdapter(annotation), False)
        elif not info.metadata and (sub := _shape(target)) is not None:
            shape.fields[alias] = _Field(sub, None, is_list)
    return shape


def _element(shape: _Shape, data: Any) -> bool:
    if not isinstance(data, Mapping) or not data:
        return False
    fields = shape.fields
    for key, value in data.items():
        spec = fields.get(key)
        if spec is None or value is None:
            return False
        if spec.complex is None:
            assert spec.primitive is not None
            try:
                spec.primitive.validate_python(value)
            except Exception:  # not shown: the model raises what it raises, and words it
                return False
        elif spec.is_list:
            if not isinstance(value, list) or not value or not all(_element(spec.complex, v) for v in value):
                return False
        elif not _element(spec.complex, value):
            return False
    if not shape.required.issubset(data.keys()):
        return False
    for aliases, needed in shape.choices:
        present = len(aliases.intersection(data.keys()))
        if present > 1 or (needed and present == 0):
            return False
    return True


def prepare(model: Any) -> bool:
    """Derive ``model``'s shape now instead of at its first resource (its field validators are built
    once per model); whether :func:`accepts` can vouch for resources of it."""
    return _shape(model) is not None


def accepts(model: Any, resource: Mapping[str, Any]) -> bool:
    """True: ``model.model_validate(dict(resource))`` passes (a resource of ``model``'s type). False:
    not shown here; validate with the model to know (and to have its message)."""
    shape = _shape(model)
    if shape is None or resource.get("resourceType") != shape.resource_type:
        return False
    return _element(shape, {k: v for k, v in resource.items() if k != "resourceType"})
