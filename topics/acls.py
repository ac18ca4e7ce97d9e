"""The principals of a clingate deployment and their Kafka ACLs, applied idempotently.

The plan is data (``deploy/security/acls.yaml``, one file): which SASL user may read and write which
catalog topic and join which consumer group. :func:`load_plan` validates it against the catalog,
:func:`plan_bindings` expands it into Kafka ACL bindings, and :func:`ensure_acls` creates the
missing ones on a cluster, reporting each as ``CREATED`` or ``EXISTS``, and lists the bindings the
cluster grants a plan principal beyond the plan as ``NOT_IN_PLAN``.

Choices:
- Like :mod:`topics.admin` for topics, nothing is ever deleted: an ACL the plan does not list may
  be an operator's deliberate grant, so it is reported and left for the operator to remove.
- Only ALLOW bindings on host ``*``: least privilege comes from granting little, not from DENY
  rules, which would also override a later deliberate grant.
- Topic names must be catalog names (DLQs included) so that a renamed topic cannot leave a
  principal silently without its grant; prefixes (the workers' own topics) are checked to be non-empty.
- Placeholders ``{app_id}`` and ``{docs_group_id}`` come from the settings of the process that
  applies the plan, so the plan fits every deployment's application id.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from pydantic import BaseModel, ConfigDict, ValidationError

from topics.catalog import CATALOG

#: The deployment's plan, next to the compose and Kubernetes files that use it.
DEFAULT_PLAN = Path(__file__).resolve().parents[1] / "deploy" / "security" / "acls.yaml"
DEFAULT_TIMEOUT_S = 30.0

_READ = (AclOperation.READ, AclOperation.DESCRIBE)
_WRITE = (AclOperation.WRITE, AclOperation.DESCRIBE)
_OWN = (AclOperation.CREATE, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS)  # fmt: skip
_GROUP = (AclOperation.READ, AclOperation.DESCRIBE)
_TRANSACTIONAL = (AclOperation.WRITE, AclOperation.DESCRIBE)


class AclPlanError(ValueError):
    """The ACL plan is malformed or names a topic the catalog does not have; the message says where."""


class Principal(BaseModel):
    """One SASL user and its grants (see the plan file's header for what each list expands to)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    role: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    read_prefixes: tuple[str, ...] = ()
    owned_prefixes: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    group_prefixes: tuple[str, ...] = ()
    transactional_prefixes: tuple[str, ...] = ()

    @property
    def kafka_principal(self) -> str:
        """The principal Kafka's authorizer sees for this SASL user."""
        return f"User:{self.name}"


class AclPlan(BaseModel):
    """The super user (who applies the plan) and every other principal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    super_user: str
    principals: tuple[Principal, ...]

    def principal(self, name: str) -> Principal:
        """The principal called ``name``.

        Raises:
            KeyError: No such principal in the plan.
        """
        for principal in self.principals:
            if principal.name == name:
                return principal
        raise KeyError(name)


def load_plan(path: Path = DEFAULT_PLAN, *, app_id: str, docs_group_id: str) -> AclPlan:
    """Read, fill in and validate an ACL plan.

    Args:
        path: The YAML plan (``super_user`` and ``principals: {name: {role, read, write, ...}}``).
        app_id: Fills ``{app_id}`` (``CLINGATE_APP_ID``).
        docs_group_id: Fills ``{docs_group_id}`` (``CLINGATE_DOCS_GROUP_ID``).

    Returns:
        The plan, every placeholder filled.

    Raises:
        AclPlanError: Malformed YAML or fields, an unknown placeholder, a topic not in the catalog,
            an empty prefix, or the super user listed as a principal.
    """
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        filled = _fill(raw, {"app_id": app_id, "docs_group_id": docs_group_id})
        plan = AclPlan(
            super_user=filled["super_user"],
            principals=tuple({"name": name, **grants} for name, grants in filled["principals"].items()),
        )
    except (yaml.YAMLError, KeyError, TypeError, AttributeError, ValidationError) as error:
        raise AclPlanError(f"{path} is not a valid ACL plan: {error}") from error
    problems = [
        f"{principal.name}: {topic!r} is not a catalog topic"
        for principal in plan.principals
        for topic in (*principal.read, *principal.write)
        if topic not in CATALOG.names
    ]
    problems += [
        f"{principal.name}: empty prefix grants every name"
        for principal in plan.principals
        if ""
        in (
            *principal.read_prefixes,
            *principal.owned_prefixes,
            *principal.group_prefixes,
            *principal.transactional_prefixes,
        )
    ]
    if any(principal.name == plan.super_user for principal in plan.principals):
        problems.append(f"{plan.super_user} is the super user: it needs no grants")
    if problems:
        raise AclPlanError(f"{path}: " + "; ".join(problems))
    return plan


def _fill(value: object, placeholders: Mapping[str, str]) -> object:
    # Placeholders only in strings, and only the known ones (str.format_map raises KeyError otherwise).
    if isinstance(value, str):
        return value.format_map(placeholders)
    if isinstance(value, list):
        return [_fill(item, placeholders) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, placeholders) for key, item in value.items()}
    return value


def _bindings(
    principal: str, resource: ResourceType, pattern: ResourcePatternType,
    names: Iterable[str], operations: tuple[AclOperation, ...],
) -> list[AclBinding]:  # fmt: skip
    return [
        AclBinding(resource, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
        for name in names
        for operation in operations
    ]


def principal_bindings(principal: Principal) -> list[AclBinding]:
    """Every ACL binding one principal's grants expand to (duplicates removed, order kept).

    Args:
        principal: The principal.
    """
    who = principal.kafka_principal
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    bindings = [
        *_bindings(who, ResourceType.TOPIC, literal, principal.read, _READ),
        *_bindings(who, ResourceType.TOPIC, literal, principal.write, _WRITE),
        *_bindings(who, ResourceType.TOPIC, prefixed, principal.read_prefixes, _READ),
        *_bindings(who, ResourceType.TOPIC, prefixed, principal.owned_prefixes, _OWN),
        *_bindings(who, ResourceType.GROUP, literal, principal.groups, _GROUP),
        *_bindings(who, ResourceType.GROUP, prefixed, principal.group_prefixes, _GROUP),
        *_bindings(
            who, ResourceType.TRANSACTIONAL_ID, prefixed, principal.transactional_prefixes, _TRANSACTIONAL
        ),
    ]
    return list(dict.fromkeys(bindings))


def plan_bindings(plan: AclPlan) -> list[AclBinding]:
    """Every ACL binding of the plan, principal by principal."""
    return [binding for principal in plan.principals for binding in principal_bindings(principal)]


class AclOutcome(StrEnum):
    """How one binding on the cluster relates to the plan."""

    CREATED = "CREATED"
    EXISTS = "EXISTS"
    MISSING = "MISSING"
    NOT_IN_PLAN = "NOT_IN_PLAN"


@dataclass(frozen=True)
class AclReport:
    """One binding and its outcome."""

    binding: AclBinding
    outcome: AclOutcome


def _cluster_bindings(admin: AdminClient, plan: AclPlan, timeout: float) -> set[AclBinding]:
    """The cluster's bindings of the plan's principals."""
    found: set[AclBinding] = set()
    for principal in plan.principals:
        query = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, principal.kafka_principal, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        found.update(admin.describe_acls(query, request_timeout=timeout).result(timeout=timeout))
    return found


def _reports(plan: AclPlan, present: set[AclBinding], created: set[AclBinding]) -> list[AclReport]:
    wanted = plan_bindings(plan)
    reports = [
        AclReport(b, AclOutcome.CREATED if b in created else AclOutcome.EXISTS if b in present
                  else AclOutcome.MISSING)
        for b in wanted
    ]  # fmt: skip
    extra = sorted(present - set(wanted), key=str)
    return reports + [AclReport(b, AclOutcome.NOT_IN_PLAN) for b in extra]


def inspect_acls(admin: AdminClient, plan: AclPlan, timeout: float = DEFAULT_TIMEOUT_S) -> list[AclReport]:
    """Compare the cluster's ACLs with the plan without changing anything.

    Args:
        admin: A client authenticated as a principal allowed to describe ACLs (the super user).
        plan: The plan.
        timeout: Seconds per broker request.

    Returns:
        EXISTS or MISSING per planned binding, then NOT_IN_PLAN for the plan principals' other bindings.
    """
    return _reports(plan, _cluster_bindings(admin, plan, timeout), set())


def ensure_acls(admin: AdminClient, plan: AclPlan, timeout: float = DEFAULT_TIMEOUT_S) -> list[AclReport]:
    """Create every planned binding the cluster lacks; never delete one.

    Args:
        admin: A client authenticated as a principal allowed to create ACLs (the super user).
        plan: The plan.
        timeout: Seconds per broker request.

    Returns:
        CREATED or EXISTS per planned binding, then NOT_IN_PLAN for the plan principals' other bindings.

    Raises:
        KafkaException: The cluster refused a creation (no authorizer configured, not authorised).
        TimeoutError: The broker did not enforce the new bindings within ``timeout``.
    """
    present = _cluster_bindings(admin, plan, timeout)
    missing = [binding for binding in plan_bindings(plan) if binding not in present]
    futures = admin.create_acls(missing, request_timeout=timeout) if missing else {}
    for future in futures.values():
        future.result(timeout=timeout)
    _await_visible(admin, plan, set(missing), timeout)
    return _reports(plan, present, set(missing))


def _await_visible(admin: AdminClient, plan: AclPlan, created: set[AclBinding], timeout: float) -> None:
    """Wait until the broker answering us enforces ``created``.

    The controller commits new ACLs before the brokers' authorizers load them from the metadata
    log; a client started right after provisioning would otherwise be refused for a moment, and an
    immediate second run would create the same bindings again instead of reporting them as existing.
    """
    deadline = time.monotonic() + timeout
    while not created <= _cluster_bindings(admin, plan, timeout):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the broker did not show {len(created)} new ACLs within {timeout:.0f}s")
        time.sleep(0.1)
