"""SASL/SCRAM over TLS and ACLs on a dedicated local broker: principals stay inside their grants,
workers still work, and the console's writes of input topics go through the request runtime.

The broker is :func:`streams.local.broker.sasl_local_kafka` serving SASL_SSL with certificates from
``deploy/security/make-certs.sh`` (its own, not the session broker: the session broker has no
authorizer), started once for the module. Every client here authenticates through
:func:`streams.runtime.kafka_config.client_config` with the settings of the principal it acts as; the
worker is a real ``clingate worker`` subprocess
configured only through ``CLINGATE_KAFKA_*``. Deploy/kafka/kafka-node.sh runs a node of its own.
(One TLS broker for the module: a second one for the client-library check cost a broker start,
about a minute on a loaded 2-core VM.)
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.clinical import QueryDecision, QueryVerdict
from schemas.console import ConsoleRequest
from schemas.console import ConsoleRequestOutcome as Outcome
from schemas.dbpm import Verdict
from schemas.docs import Review, ReviewDecision
from schemas.wire import make_serde
from streams.local.broker import (
    LOG4J_CONSOLE,
    free_port,
    sasl_local_kafka,
    wait_for_kafka,
    write_start_scripts,
)
from streams.local.jars import ensure_artifacts
from streams.replay.kafka import replay_via_kafka
from streams.requests.check import RequestAction, publication_request
from streams.runtime.dlq import SourceRecord, dead_letter_record, processing_failed
from streams.runtime.kafka_clients import read_to_end
from streams.runtime.kafka_config import client_config
from streams.runtime.settings import Settings, get_settings
from streams.testing.schema_samples import samples
from streams.testing.worker import WorkerProcess, comparison_engine
from tests.integration.test_dbpm_worker import COMPARISON_FLAGS, _contract, _events, _in_process
from topics.acls import DEFAULT_PLAN, AclOutcome, AclPlan, ensure_acls, load_plan
from topics.admin import ensure_topics
from topics.catalog import (
    AGENT_REQUESTS,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_QUERY_DECISIONS,
    CONSOLE_REQUEST_OUTCOMES,
    CONSOLE_REQUESTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_VERDICTS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    build_catalog,
    dlq_name,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

ADMIN = "clingate-admin"
USERS = (ADMIN, "clingate-worker", "clingate-generator", "clingate-verifier", "clingate-downstream",
         "clingate-console", "clingate-requests")  # fmt: skip
PASSWORDS = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in USERS}
APP_ID = "clingate-secured"
PARTITIONS = 2


def _tls(user: str, certs: Path) -> Settings:
    """``user``'s client settings: SCRAM over TLS, the broker verified against the generated CA."""
    return Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512",
                    kafka_username=user, kafka_password=PASSWORDS[user],
                    kafka_ssl_ca_file=certs / "ca.pem")  # fmt: skip


@dataclass(frozen=True)
class Secured:
    """The module's SASL_SSL broker."""

    bootstrap: str
    plan: AclPlan
    certs: Path

    def as_(self, user: str) -> Settings:
        """The client settings of principal ``user``."""
        return _tls(user, self.certs)

    def admin(self, user: str = ADMIN) -> AdminClient:
        """An admin client acting as ``user``."""
        return AdminClient(client_config(self.bootstrap, settings=self.as_(user)))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and the certificate of a node at 127.0.0.1 (make-certs.sh), shared by the module's brokers."""
    directory = tmp_path_factory.mktemp("certs")
    script = REPO / "deploy" / "security" / "make-certs.sh"
    subprocess.run([str(script), str(directory), "127.0.0.1"], check=True)
    return directory


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Secured]:
    """A started SASL_SSL broker with the catalog's topics and the deployment's ACL plan applied."""
    broker = sasl_local_kafka(tmp_path_factory.mktemp("sasl-kafka"), home=get_settings().home,
                              super_user=ADMIN, passwords=PASSWORDS, tls_dir=certs)  # fmt: skip
    bootstrap = broker.start()
    try:
        plan = load_plan(DEFAULT_PLAN, app_id=APP_ID, docs_group_id="clingate-docs")
        cluster = Secured(bootstrap, plan, certs)
        ensure_topics(cluster.admin(), build_catalog(PARTITIONS))
        yield cluster
    finally:
        broker.stop()


def _produce_error(bootstrap: str, principal: Settings, topic: str, value: bytes = b"x") -> int | None:
    """The delivery error code of one record ``principal`` writes to ``topic`` (None: delivered)."""
    producer = Producer(client_config(bootstrap, settings=principal, **{"message.timeout.ms": 15000}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, key=b"PT-1", value=value, on_delivery=lambda error, _: outcome.append(error))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0].code() if outcome[0] is not None else None


def _consume_error(cluster: Secured, user: str, topic: str, group: str) -> int | None:
    """The first error ``user`` meets reading ``topic`` in ``group`` (None: a record arrived)."""
    consumer = Consumer(client_config(cluster.bootstrap, settings=cluster.as_(user), **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
    }))  # fmt: skip
    consumer.subscribe([topic])
    try:
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is None:
                continue
            return message.error().code() if message.error() else None
        raise AssertionError(f"{user} read nothing from {topic} and got no error")
    finally:
        consumer.close()


def test_acl_plan_applies_idempotently(secured: Secured) -> None:
    """Scenario: the plan is applied twice; the second run creates nothing."""
    first = ensure_acls(secured.admin(), secured.plan)
    second = ensure_acls(secured.admin(), secured.plan)
    assert {r.outcome for r in first} <= {AclOutcome.CREATED, AclOutcome.EXISTS}
    assert {r.outcome for r in second} == {AclOutcome.EXISTS}
    assert len(second) == len(first)


def test_principals_cannot_read_or_write_outside_their_grants(secured: Secured) -> None:
    """Scenario: each role tries its own topics and someone else's.

    A generator writes candidates but not verdicts and cannot read decisions; a verifier cannot
    write candidates; a downstream reader reads decisions, writes nothing and cannot join a worker's
    group; a worker cannot create topics outside its application's prefix.
    """
    bootstrap, as_ = secured.bootstrap, secured.as_
    ensure_acls(secured.admin(), secured.plan)
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert _produce_error(bootstrap, as_("clingate-generator"), DBPM_CANDIDATES) is None
    assert _produce_error(bootstrap, as_("clingate-generator"), DBPM_VERDICTS) == denied
    assert _consume_error(secured, "clingate-generator", DBPM_DECISIONS, "clingate-generator-x") == denied
    assert _produce_error(bootstrap, as_("clingate-verifier"), DBPM_CANDIDATES) == denied

    assert _produce_error(bootstrap, as_(ADMIN), DBPM_DECISIONS) is None
    assert _consume_error(secured, "clingate-downstream", DBPM_DECISIONS, "clingate-downstream-a") is None
    assert _produce_error(bootstrap, as_("clingate-downstream"), DBPM_DECISIONS) == denied
    assert _consume_error(secured, "clingate-downstream", DBPM_DECISIONS, APP_ID) == (
        KafkaError.GROUP_AUTHORIZATION_FAILED
    )

    worker = secured.admin("clingate-worker")
    with pytest.raises(KafkaException) as refused:
        worker.create_topics([NewTopic("clingate.rogue", 1, 1)])["clingate.rogue"].result(timeout=30)
    assert refused.value.args[0].code() == denied


@pytest.fixture
def as_admin(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test process's own clients (the replay feeder) authenticate as the super user."""
    monkeypatch.setenv("CLINGATE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("CLINGATE_KAFKA_SSL_CA_FILE", str(secured.certs / "ca.pem"))
    monkeypatch.setenv("CLINGATE_KAFKA_USERNAME", ADMIN)
    monkeypatch.setenv("CLINGATE_KAFKA_PASSWORD", PASSWORDS[ADMIN])
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_worker_with_its_own_principal_decides_like_the_in_process_engine(
    secured: Secured, as_admin: None, tmp_path: Path
) -> None:
    """Scenario: a ``clingate worker`` authenticated as clingate-worker replays a slice of the example.

    The worker may not create catalog topics (CLINGATE_ENSURE_TOPICS=false; provisioning did),
    creates its changelogs under its own prefix and joins its own group; every candidate gets the
    in-process engine's decision and the memory rebuilt from its changelog is the engine's.
    """
    bootstrap = secured.bootstrap
    ensure_acls(secured.admin(), secured.plan)
    worker = WorkerProcess(bootstrap, APP_ID, tmp_path / "worker", {
        **COMPARISON_FLAGS,
        "CLINGATE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CLINGATE_KAFKA_SSL_CA_FILE": str(secured.certs / "ca.pem"),
        "CLINGATE_KAFKA_USERNAME": "clingate-worker",
        "CLINGATE_KAFKA_PASSWORD": PASSWORDS["clingate-worker"],
        "CLINGATE_ENSURE_TOPICS": "false",
        "CLINGATE_TOPIC_PARTITIONS": str(PARTITIONS),
    })  # fmt: skip
    worker.start()
    try:
        events = _events(100)  # what is proven here is the principal's access, not the engine at length
        engine = comparison_engine()
        result = replay_via_kafka(bootstrap, events, engine, make_serde(None), APP_ID, timeout_s=90.0)
    finally:
        worker.stop()

    expected_decisions, expected_state = _in_process(engine, events)
    assert _contract(result.decisions) == expected_decisions
    assert result.state == expected_state
    assert _count(secured, "clingate-downstream", DBPM_DECISIONS) >= len(expected_decisions)


def _count(cluster: Secured, user: str, topic: str) -> int:
    """Records ``user`` reads from every partition of ``topic`` until 2 s pass without one."""
    reader = Consumer(client_config(cluster.bootstrap, settings=cluster.as_(user), **{
        "group.id": "clingate-downstream-count", "enable.auto.commit": False,
    }))  # fmt: skip
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, idle = 0, 0
    try:
        while idle < 10:
            message = reader.poll(0.2)
            if message is None:
                idle += 1
                continue
            assert message.error() is None, message.error()
            count, idle = count + 1, 0
    finally:
        reader.close()
    return count


def test_clients_authenticate_over_sasl_ssl_with_the_generated_ca(secured: Secured) -> None:
    """Scenario: the module's broker serves SASL_SSL with the make-certs.sh CA and node certificate.

    A producer and a consumer configured by client_config write and read a record: both verify the
    broker against the CA file of CLINGATE_KAFKA_SSL_CA_FILE, host name included.
    """
    settings = secured.as_(ADMIN)
    topic = f"tls-check-{uuid.uuid4().hex[:8]}"
    admin = secured.admin()  # kept referenced until the result: a collected client aborts its requests
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer(client_config(secured.bootstrap, settings=settings))
    producer.produce(topic, key=b"k", value=b"over TLS")
    assert producer.flush(30) == 0
    consumer = Consumer(client_config(secured.bootstrap, settings=settings, **{
        "group.id": f"tls-check-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
    }))  # fmt: skip
    consumer.subscribe([topic])
    try:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert message.value() == b"over TLS"
    finally:
        consumer.close()


def _kafka_home(directory: Path) -> Path:
    """A stand-in for the image's /opt/kafka: its two start scripts, on this machine's broker jars."""
    write_start_scripts(directory / "bin", str(ensure_artifacts(get_settings().home)), LOG4J_CONSOLE.as_uri())
    return directory


def test_the_deployment_broker_script_runs_a_secured_node(tmp_path: Path, certs: Path) -> None:
    """Scenario: deploy/kafka/kafka-node.sh (the compose and Kubernetes brokers) runs one node here.

    With the generated certificates and one password file per principal it formats the storage
    with their SCRAM credentials (its server.properties, which holds the super user's password, readable
    by its user only) and serves SASL_SSL with the authorizer on: the super user
    creates a topic and writes to it, another principal without a grant is refused.
    """
    users = tmp_path / "users"
    users.mkdir()
    for user in (ADMIN, "clingate-generator"):
        (users / user).write_text(PASSWORDS[user])
    port = free_port()
    controller = free_port(taken=(port,))
    environment = {
        **os.environ, "KAFKA_NODE_ID": "1", "KAFKA_CLUSTER_ID": "q1Sh-9_ISia_zwGINzRvyQ",
        "KAFKA_VOTERS": f"1@127.0.0.1:{controller}", "KAFKA_ADVERTISED_HOST": "127.0.0.1",
        "KAFKA_SUPER_USER": ADMIN, "SCRAM_USERS_DIR": str(users), "CERT_DIR": str(certs),
        "KAFKA_DATA_DIR": str(tmp_path / "data"), "KAFKA_CLIENT_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller), "KAFKA_HOME": str(_kafka_home(tmp_path / "kafka")),
        "KAFKA_CONFIG_FILE": str(tmp_path / "server.properties"),
    }  # fmt: skip
    with (tmp_path / "node.log").open("wb") as log:
        node = subprocess.Popen(["bash", str(REPO / "deploy" / "kafka" / "kafka-node.sh")], env=environment,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    bootstrap = f"127.0.0.1:{port}"

    def tls(user: str) -> Settings:
        return _tls(user, certs)

    try:
        wait_for_kafka(bootstrap, 120, tls(ADMIN), alive=lambda: node.poll() is None)
        properties = tmp_path / "server.properties"
        assert properties.stat().st_mode & 0o777 == 0o600, "it holds the super user's password"
        admin = AdminClient(client_config(bootstrap, settings=tls(ADMIN)))
        admin.create_topics([NewTopic("node-check", 1, 1)])["node-check"].result(timeout=30)
        assert _produce_error(bootstrap, tls(ADMIN), "node-check") is None
        assert _produce_error(bootstrap, tls("clingate-generator"), "node-check") == (
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
    finally:
        os.killpg(node.pid, signal.SIGTERM)
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


def _secured_env(secured: Secured, user: str) -> dict[str, str]:
    """The environment of a clingate process authenticated as ``user`` on the module's broker."""
    return {
        "CLINGATE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CLINGATE_KAFKA_SSL_CA_FILE": str(secured.certs / "ca.pem"),
        "CLINGATE_KAFKA_USERNAME": user,
        "CLINGATE_KAFKA_PASSWORD": PASSWORDS[user],
        "CLINGATE_ENSURE_TOPICS": "false",
        "CLINGATE_TOPIC_PARTITIONS": str(PARTITIONS),
    }


def _produce(secured: Secured, user: str, topic: str, value: bytes, key: bytes, **record: Any) -> Message:
    """One record ``user`` writes; its delivery report (an error raises)."""
    producer = Producer(client_config(secured.bootstrap, settings=secured.as_(user)))
    reports: list[Message] = []
    producer.produce(topic, key=key, value=value, on_delivery=lambda error, m: reports.append(m), **record)
    producer.flush(30)
    [report] = reports
    assert report.error() is None, report.error()
    return report


def _outcomes(secured: Secured, wanted: set[str], timeout_s: float = 60.0) -> dict[str, Outcome]:
    """The outcomes of the requests ``wanted``, read as the console reads them."""
    serde = make_serde(None)
    found: dict[str, Outcome] = {}
    consumer = Consumer(client_config(secured.bootstrap, settings=secured.as_("clingate-console"), **{
        "group.id": f"clingate-console-outcomes-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    }))  # fmt: skip
    consumer.subscribe([CONSOLE_REQUEST_OUTCOMES])
    deadline = time.monotonic() + timeout_s
    try:
        while not wanted <= found.keys() and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            outcome = serde.decode(message.value(), Outcome, topic=CONSOLE_REQUEST_OUTCOMES)
            found[outcome.request_id] = outcome
    finally:
        consumer.close()
    return found


def test_the_console_cannot_write_an_input_topic_and_its_redrive_is_carried_out_by_the_request_runtime(
    secured: Secured, tmp_path: Path
) -> None:
    """Scenario: with the console's credentials, a forged verifier verdict, a FHIR update, a ground truth,
    a dead letter, a review, a question to the agent and a pharmacist's decision are refused by the
    broker; a re-drive, an SME's review and a pharmacist's query decision it asks for are carried out by
    ``clingate worker --role requests`` running as clingate-requests, and a pin request carrying a
    forged verdict is refused by that runtime.

    The FHIR worker's stage is played by the super user: it writes a FHIR update and its dead letter.
    """
    ensure_acls(secured.admin(), secured.plan)
    serde = make_serde(None)
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    console = secured.as_("clingate-console")
    forged = next(s for s in samples() if isinstance(s, Verdict))
    assert forged.source == "verifier_mmed"
    verdict = serde.encode(forged, topic=DBPM_VERDICTS)
    assert _produce_error(secured.bootstrap, console, DBPM_VERDICTS, verdict) == denied
    written = (
        FHIR_UPDATES, DOCS_GROUND_TRUTH, dlq_name(FHIR_UPDATES), DOCS_REVIEWS, AGENT_REQUESTS,
        CLINICAL_QUERY_DECISIONS, CLINICAL_EVIDENCE_REVIEWS,
    )  # fmt: skip
    for topic in written:
        assert _produce_error(secured.bootstrap, console, topic) == denied, topic

    update = next(s for s in samples() if type(s).__name__ == "FhirUpdate")
    original = _produce(secured, ADMIN, FHIR_UPDATES, serde.encode(update, topic=FHIR_UPDATES), b"p-000123",
                        partition=1, headers=[("traceparent", b"00-abc-01")])  # fmt: skip
    # A delivery report carries no headers: the stage read the record with them.
    traced = (("traceparent", b"00-abc-01"),)
    source = dataclasses.replace(SourceRecord.from_message(original), headers=traced)
    dead = dead_letter_record(
        serde, processing_failed(source, KeyError("a bug since fixed"), "clingate.fhir.FhirUpdate")
    )
    letter = _produce(secured, ADMIN, dead.topic, dead.value, dead.key or b"", headers=dead.headers)
    target = f"{dead.topic}[{letter.partition()}]@{letter.offset()}"
    now = datetime.now(UTC)
    redrive = ConsoleRequest(
        request_id=f"redrive-{uuid.uuid4().hex[:8]}", event_time=now, user="op", role="operator",
        action="redrive", target=target, topic=FHIR_UPDATES, note="fixed",
    )  # fmt: skip
    forged_pin = ConsoleRequest(
        request_id=f"pin-{uuid.uuid4().hex[:8]}", event_time=now, user="op", role="operator", action="pin",
        target="ner|patient", topic=DBPM_VERDICTS, key=b"ner|patient",
        value=serde.encode(forged, topic=DBPM_VERDICTS), note="forged",
    )  # fmt: skip
    review = publication_request(
        RequestAction.REVIEW, Review(doc_id="doc-1", ts=now, reviewer="sam", decision=ReviewDecision.AGREES),
        serde, request_id=f"review-{uuid.uuid4().hex[:8]}", user="sam", role="sme", at=now,
    )  # fmt: skip
    decision_id = f"queries-{uuid.uuid4().hex[:8]}"
    queries = ["digoxin toxicity management"]
    approved = QueryDecision(
        patient_id="PT-1", run_id="run-1", event_time=now, proposed_at=now, pharmacist="ph",
        decision_id=decision_id, decision=QueryVerdict.APPROVED, proposed=queries, queries=queries,
    )  # fmt: skip
    decision = publication_request(
        RequestAction.QUERY_DECISION, approved, serde, request_id=decision_id, user="ph", role="pharmacist",
        at=now,
    )  # fmt: skip
    asked = (redrive, forged_pin, review, decision)
    for request in asked:
        value = serde.encode(request, topic=CONSOLE_REQUESTS)
        _produce(secured, "clingate-console", CONSOLE_REQUESTS, value, request.target.encode())

    runtime = WorkerProcess(secured.bootstrap, APP_ID, tmp_path / "requests",
                            _secured_env(secured, "clingate-requests"), role="requests")  # fmt: skip
    runtime.start()
    try:
        outcomes = _outcomes(secured, {request.request_id for request in asked})
    finally:
        runtime.stop()
    assert {r.request_id for r in asked} <= outcomes.keys(), runtime.log.read_text()[-4000:]
    for carried in (redrive, review, decision):
        assert outcomes[carried.request_id].outcome == "ok", outcomes[carried.request_id].reason
    assert outcomes[redrive.request_id].partition == 1
    assert outcomes[forged_pin.request_id].outcome == "refused"
    assert "not an operator's pin" in outcomes[forged_pin.request_id].reason

    reader = Consumer(client_config(secured.bootstrap, settings=secured.as_(ADMIN), **{
        "group.id": f"check-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed",
    }))  # fmt: skip
    try:
        copies = [
            m for m in read_to_end(reader, {FHIR_UPDATES: {1: original.offset()}}, 30, named_only=True)
            if m.offset() != original.offset()
        ]  # fmt: skip
    finally:
        reader.close()
    [copy] = copies
    assert (copy.key(), copy.value()) == (original.key(), original.value())
    headers = dict(copy.headers() or [])
    assert headers["traceparent"] == b"00-abc-01"
    assert headers["__clingate.redrive.dead-letter"] == target.encode()
    assert headers["__clingate.redrive.action-id"] == redrive.request_id.encode()
