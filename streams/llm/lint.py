"""The response-model registry and the schema linter (DocGemma §6 'null cascade' rule).

DocGemma §6/§13: in a constrained schema the decision-critical fields come first and optional or
nullable fields come last; reversing the order dropped argument accuracy from 88% to 21% (once the
model emits one null it tends to emit null for every field after it), and free-form reasoning before a
decision drifts the decision (reasoning-then-select: 55% vs 80%). The linter checks the JSON schema the
server actually receives, in generation order (pydantic keeps declaration order in ``properties``):

* ``null-cascade``: within an object, no required non-nullable property after an optional or nullable
  one;
* ``decision-after-free-text``: no property that is or contains a decision (enum, const, boolean) after
  a property that is or contains free text;
* ``unbounded``: every string has ``maxLength`` (or is an enum/const) and every array ``maxItems``, so
  a constrained decoder cannot run to the token limit (which is a failed call, never a partial answer);
* ``decoder-unsupported``: no string mixes ``pattern``/``format`` with length bounds. vLLM's xgrammar
  backend compiles the pattern and silently drops the bounds, so vLLM rejects such schemas for xgrammar
  (``has_xgrammar_unsupported_json_features`` in vllm ``v1/structured_output/backend_xgrammar.py``)
  and ``auto`` falls back to another backend. With ``unbounded`` this means: use an enum or a short
  bounded string, never a pattern.

Free text is a string that is not an enum/const and whose ``maxLength`` is absent or above
:data:`SHORT_TEXT_MAX_CHARS`. Short bounded strings (an entity span copied from the narrative, a
relation label) are not prose: a label after its span (entity, then category) is the natural order and
does not drift. The 120-character line is this project's choice; the sources give no number.

Every response model is declared with :func:`response_model`, which lints it at class definition
(a bad schema fails at import, in every test run) and registers it; every backend refuses an
unregistered model before the call (:func:`require_registered`), so no call can bypass the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

SHORT_TEXT_MAX_CHARS = 120

M = TypeVar("M", bound=type[BaseModel])

_REGISTRY: dict[str, type[BaseModel]] = {}


class SchemaLintError(TypeError):
    """A response model breaks the schema rules; the message lists every issue and how to fix it."""


class UnregisteredResponseModelError(TypeError):
    """A call named a response model not declared with :func:`response_model` (so never linted)."""


@dataclass(frozen=True, slots=True)
class LintIssue:
    """One rule violation.

    Attributes:
        rule: ``null-cascade`` | ``decision-after-free-text`` | ``unbounded`` | ``decoder-unsupported``.
        path: JSON-pointer-like location of the offending property.
        message: what is wrong and what to do.
    """

    rule: str
    path: str
    message: str


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    if not ref.startswith("#/$defs/"):
        raise SchemaLintError(f"unsupported $ref {ref!r}: only local #/$defs references are linted")
    return _resolve(root["$defs"][ref.removeprefix("#/$defs/")], root)


def _branches(schema: dict[str, Any], root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The schema itself, or each alternative of an anyOf/oneOf, resolved."""
    schema = _resolve(schema, root)
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives is None:
        yield schema
        return
    for alternative in alternatives:
        yield from _branches(alternative, root)


def _types(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    if isinstance(declared, list):
        return set(declared)
    return {declared} if isinstance(declared, str) else set()


def _is_decision(schema: dict[str, Any]) -> bool:
    return "enum" in schema or "const" in schema or _types(schema) == {"boolean"}


def _children(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from schema.get("properties", {}).values()
    items = schema.get("items")
    if isinstance(items, dict):
        yield items


def _contains(
    schema: dict[str, Any], root: dict[str, Any], leaf: Callable[[dict[str, Any]], bool], seen: frozenset[int]
) -> bool:
    for branch in _branches(schema, root):
        if id(branch) in seen:
            continue
        if leaf(branch) or any(_contains(c, root, leaf, seen | {id(branch)}) for c in _children(branch)):
            return True
    return False


def _is_free_text(schema: dict[str, Any]) -> bool:
    if "string" not in _types(schema) or "enum" in schema or "const" in schema:
        return False
    return schema.get("maxLength", SHORT_TEXT_MAX_CHARS + 1) > SHORT_TEXT_MAX_CHARS


def _is_nullable(schema: dict[str, Any], root: dict[str, Any]) -> bool:
    return any("null" in _types(branch) for branch in _branches(schema, root))


def _lint_object(schema: dict[str, Any], root: dict[str, Any], path: str) -> Iterator[LintIssue]:
    required = set(schema.get("required", []))
    first_optional: str | None = None
    first_text: str | None = None
    for name, prop in schema.get("properties", {}).items():
        where = f"{path}/{name}"
        optional = name not in required or _is_nullable(prop, root)
        if optional and first_optional is None:
            first_optional = name
        elif not optional and first_optional is not None:
            yield LintIssue(
                "null-cascade",
                where,
                f"required field {name!r} follows optional/nullable field {first_optional!r}: "
                "move optional and nullable fields to the end",
            )
        if first_text is not None and _contains(prop, root, _is_decision, frozenset()):
            yield LintIssue(
                "decision-after-free-text",
                where,
                f"decision field {name!r} follows free-text field {first_text!r}: "
                "put decision fields before free text",
            )
        if first_text is None and _contains(prop, root, _is_free_text, frozenset()):
            first_text = name


def _lint_bounds(schema: dict[str, Any], path: str) -> Iterator[LintIssue]:
    types = _types(schema)
    if "string" in types and not ({"enum", "const", "maxLength"} & schema.keys()):
        yield LintIssue("unbounded", path, "string without maxLength: bound it (Field(max_length=...))")
    if "array" in types and "maxItems" not in schema:
        yield LintIssue("unbounded", path, "array without maxItems: bound it (Field(max_length=...))")
    generative = {"pattern", "format"} & schema.keys()
    if "string" in types and generative and {"minLength", "maxLength"} & schema.keys():
        yield LintIssue(
            "decoder-unsupported",
            path,
            "pattern/format with length bounds (xgrammar drops the bounds): use an enum or a bounded string",
        )


def _walk(schema: dict[str, Any], root: dict[str, Any], path: str, seen: set[int]) -> Iterator[LintIssue]:
    for branch in _branches(schema, root):
        if id(branch) in seen:
            continue
        seen.add(id(branch))
        yield from _lint_bounds(branch, path)
        if "properties" in branch:
            yield from _lint_object(branch, root, path)
            for name, prop in branch["properties"].items():
                yield from _walk(prop, root, f"{path}/{name}", seen)
        items = branch.get("items")
        if isinstance(items, dict):
            yield from _walk(items, root, f"{path}/items", seen)


def lint_schema(schema: dict[str, Any]) -> list[LintIssue]:
    """Lint a JSON schema as a constrained decoder would generate it.

    Args:
        schema: a JSON schema (local ``#/$defs`` references are followed).

    Returns:
        Every issue found, in generation order; empty when the schema is sound.
    """
    return list(_walk(schema, schema, "", set()))


@cache
def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema sent to the server for ``model`` (computed once per model).

    Args:
        model: a pydantic model.

    Returns:
        ``model.model_json_schema()``; callers MUST NOT mutate it.
    """
    return model.model_json_schema()


def lint_response_model(model: type[BaseModel]) -> list[LintIssue]:
    """Lint a pydantic response model's JSON schema (see :func:`lint_schema`).

    Args:
        model: the model.

    Returns:
        Every issue found; empty when the model is sound.
    """
    return lint_schema(json_schema_of(model))


def response_model(model: M) -> M:
    """Class decorator: lint a response model and register it for use with the LLM client.

    Args:
        model: the pydantic model class.

    Returns:
        The same class, registered.

    Raises:
        SchemaLintError: when the schema breaks a rule, or another model already has this name.
    """
    issues = lint_response_model(model)
    if issues:
        listed = "; ".join(f"{i.rule} at {i.path or '/'}: {i.message}" for i in issues)
        raise SchemaLintError(f"response model {model.__qualname__} breaks the schema rules: {listed}")
    existing = _REGISTRY.get(model.__name__)
    if existing is not None and existing is not model:
        raise SchemaLintError(f"two response models are named {model.__name__!r}: names must be unique")
    _REGISTRY[model.__name__] = model
    return model


def is_registered(model: type[BaseModel]) -> bool:
    """Whether ``model`` was declared with :func:`response_model`."""
    return _REGISTRY.get(model.__name__) is model


def require_registered(model: type[BaseModel]) -> None:
    """Refuse a response model not declared with :func:`response_model` (its schema was never linted).

    Raises:
        UnregisteredResponseModelError: a programming error, raised before any call is made.
    """
    if not is_registered(model):
        raise UnregisteredResponseModelError(
            f"{model.__qualname__} is not a registered response model: "
            "declare it with @streams.llm.lint.response_model"
        )


def registered_models() -> tuple[type[BaseModel], ...]:
    """Every response model registered so far in this process (import order)."""
    return tuple(_REGISTRY.values())
