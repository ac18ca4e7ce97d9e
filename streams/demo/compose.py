"""The compose deployment run for real: ``make compose-check`` (``python -m streams.demo.compose``).

What it does, on a Docker engine with clingate's images built (``make images``):

1. Prepares what ``deploy/compose`` expects beside it: a CA and the nodes' certificate for 127.0.0.1
   (``deploy/security/make-certs.sh``) and one random password per principal of the ACL plan, in a
   scratch directory (``CLINGATE_CERTS_DIR``, ``CLINGATE_SECRETS_DIR``).
2. Starts the demo's LLM test server on loopback (its answers play the synthetic ground truth) and
   brings the deployment up (``docker-compose up -d``, project ``clingate-rehearsal``) on the images of
   this checkout: three SASL_SSL brokers, the provisioning one-shots, two workers, the docs worker
   (rules only), the generator and verifier groups and Prometheus, each as its own principal.
3. Publishes the demo's streams as ``clingate-upstream``: the DBPM narratives, the clinical FHIR
   timeline with the golden bundles and their reviews, and the classification requests. Half-way through,
   a broker container is killed; it is started again once the second half is out. (Not the golden runs
   through the output gates: an upstream answering the router waits for each route, which the demo
   does; so the assessments expected here are the pure processor's without them.)
4. Reads the outputs as ``clingate-downstream`` (``read_committed``) and checks them: every candidate the
   generator emits for the narratives has exactly one gate decision; the clinical assessments are the
   pure processor's, each once; every request has exactly one disposition, the rules-only arbiter's.
   Prometheus reports every clingate process's scrape up.
5. Takes the deployment down with its volumes and stops the test server, whatever happened.

The checks name what is missing; :func:`rehearse` returns the figures and the failures.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from rich.console import Console

from schemas.base import AvroModel
from schemas.clinical import ClinicalAssessment
from schemas.dbpm import GateDecision
from schemas.docs import Disposition
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.demo.plan import Plan, build_plan, clinical_reference
from streams.llm.serve.testserver import DEFAULT_MODEL
from streams.local.broker import docker_engine_available
from streams.local.images import image_exists, image_names
from streams.local.process import SOURCE_ROOT, ProcessHandle, http_answers, python_module
from streams.runtime.kafka_config import client_config
from streams.runtime.settings import Settings, get_settings
from topics.acls import DEFAULT_PLAN, load_plan
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_REVIEWS,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    FHIR_UPDATES,
)

COMPOSE_DIR = SOURCE_ROOT / "deploy" / "compose"
PROJECT = "clingate-rehearsal"
#: The brokers' client listeners (deploy/compose/docker-compose.yml).
BOOTSTRAP = "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
#: Every clingate process's metrics endpoint (docker-compose.yml): ready once all answer.
METRICS_PORTS = (6066, 6076, 6067, 6068, 6069, 6070, 6071)
PROMETHEUS = "http://127.0.0.1:9090"
#: The compose console's sign-in page: it answers once the console serves (it needs no Kafka).
CONSOLE_SIGN_IN = "http://127.0.0.1:6080/login"
#: The broker killed half-way through and started again.
KILLED = "kafka-2"
#: librdkafka's log level for the rehearsal's clients: critical only, since the refused connections to
#: the killed broker are expected (the checks judge what arrived).
QUIET = 2


@dataclass
class Rehearsal:
    """What a rehearsal saw: the figures printed, and the failed checks (empty: passed)."""

    figures: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def check(self, holds: bool, failure: str) -> None:
        if not holds:
            self.failures.append(failure)


class Deployment:
    """``deploy/compose`` brought up under :data:`PROJECT` with this checkout's images."""

    def __init__(self, scratch: Path, settings: Settings, llm_url: str) -> None:
        images = image_names(settings)
        self.passwords = _secrets(scratch / "secrets")
        _certificates(scratch / "certs")
        self.env = {
            **os.environ,
            "CLINGATE_IMAGE": images.clingate,
            "CLINGATE_KAFKA_IMAGE": images.kafka,
            "CLINGATE_PROMETHEUS_IMAGE": images.prometheus,
            "CLINGATE_CERTS_DIR": str(scratch / "certs"),
            "CLINGATE_SECRETS_DIR": str(scratch / "secrets"),
            "CLINGATE_GENERATOR_URL": llm_url,
            "CLINGATE_VERIFIER_URL": llm_url,
            "CLINGATE_GENERATOR_MODEL": DEFAULT_MODEL,
            "CLINGATE_VERIFIER_MODEL": DEFAULT_MODEL,
            "CLINGATE_AGENT_LLM_URL": llm_url,
            "CLINGATE_AGENT_LLM_MODEL": DEFAULT_MODEL,
            "CLINGATE_DOCS_LLM_URL": "",
        }
        self.ca_file = scratch / "certs" / "ca.pem"

    def compose(self, *arguments: str, timeout_s: float = 300.0) -> str:
        argv = ["docker-compose", "-p", PROJECT, "--project-directory", str(COMPOSE_DIR),
                "-f", str(COMPOSE_DIR / "docker-compose.yml"), *arguments]  # fmt: skip
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"docker-compose {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def principal(self, user: str) -> Settings:
        """The client settings of ``user`` on the deployment's SASL_SSL listeners."""
        return Settings(
            kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-512", kafka_username=user,
            kafka_password=self.passwords[user], kafka_ssl_ca_file=self.ca_file,
        )  # fmt: skip

    def logs(self) -> str:
        """Each service's state and health, then the last lines each logged."""
        return self.compose("ps") + self.compose("logs", "--no-color", "--tail", "40")


def _secrets(directory: Path) -> dict[str, str]:
    plan = load_plan(DEFAULT_PLAN, app_id="clingate-dbpm", docs_group_id="clingate-docs")
    directory.mkdir(parents=True)
    passwords = {
        user: secrets.token_hex(24) for user in [plan.super_user, *(p.name for p in plan.principals)]
    }
    for user, password in passwords.items():
        (directory / user).write_text(password)
        (directory / user).chmod(0o644)  # the clingate image runs as its own user
    return passwords


def _certificates(directory: Path) -> None:
    script = SOURCE_ROOT / "deploy" / "security" / "make-certs.sh"
    subprocess.run(["bash", str(script), str(directory), "127.0.0.1"], check=True, capture_output=True)
    for pem in directory.glob("*.pem"):
        pem.chmod(0o644)


@contextmanager
def _llm_server(plan: Plan, scratch: Path) -> Iterator[str]:
    script = scratch / "llm-script.json"
    plan.loop.write(script)
    server = ProcessHandle(
        "LLM test server", python_module("streams.demo.llm", "--script", str(script)), log=scratch / "llm.log"
    ).start()
    try:
        server.wait_until(lambda: b"listening " in (scratch / "llm.log").read_bytes(), timeout_s=60)
        yield (scratch / "llm.log").read_text().split("listening ", 1)[1].split()[0]
    finally:
        server.stop(10.0)


def _wait(what: str, ready: Callable[[], bool], timeout_s: float) -> float:
    started = time.monotonic()
    while not ready():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - started


def _all_serving() -> bool:
    pages = [f"http://127.0.0.1:{port}/metrics" for port in METRICS_PORTS] + [CONSOLE_SIGN_IN]
    return all(http_answers(page, 2.0) for page in pages)


def _publish(producer: Producer, serde: Serde, records: Sequence[tuple[str, str, AvroModel]]) -> None:
    for topic, key, value in records:
        producer.produce(topic, key=key.encode(), value=serde.encode(value, topic=topic))
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records not delivered within 120 s")


def _inputs(plan: Plan) -> list[tuple[str, str, AvroModel]]:
    """The demo's streams, interleaved so that each half of the list carries part of every stream."""
    streams: list[list[tuple[str, str, AvroModel]]] = [
        [(DBPM_NARRATIVES, n.patient_id, n) for n in plan.loop.narratives],
        [(FHIR_UPDATES, u.patient_id, u) for u in plan.fhir],
        [(DOCS_CLASSIFICATIONS, d.request.doc_id, d.request) for d in plan.documents],
    ]
    keyed = [((i + 0.5) / len(stream), n, record) for n, stream in enumerate(streams)
             for i, record in enumerate(stream)]  # fmt: skip
    return [record for _, _, record in sorted(keyed, key=lambda k: (k[0], k[1]))]


def _golden(plan: Plan) -> list[tuple[str, str, AvroModel]]:
    """The golden bundles, then their reviews (a review follows its bundle, as in the demo)."""
    bundles: list[tuple[str, str, AvroModel]] = [(FHIR_UPDATES, u.patient_id, u) for u, _ in plan.golden]
    return [*bundles, *((CLINICAL_REVIEWS, r.patient_id, r) for _, r in plan.golden)]


class _Outputs:
    """The outputs topics as ``clingate-downstream`` reads them (``read_committed``), from the start."""

    def __init__(self, settings: Settings, serde: Serde) -> None:
        group = f"clingate-downstream-rehearsal-{uuid.uuid4().hex[:8]}"
        config = client_config(BOOTSTRAP, settings=settings, **{
            "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "isolation.level": "read_committed", "log_level": QUIET,
        })  # fmt: skip
        self.consumer = Consumer(config)
        self.consumer.subscribe([DBPM_DECISIONS, CLINICAL_ASSESSMENTS, DOCS_DISPOSITIONS])
        self.serde = serde
        self.decisions: list[GateDecision] = []
        self.assessments: list[ClinicalAssessment] = []
        self.dispositions: list[Disposition] = []

    def poll(self, seconds: float) -> None:
        kinds: dict[str, tuple[type[AvroModel], list[Any]]] = {
            DBPM_DECISIONS: (GateDecision, self.decisions),
            CLINICAL_ASSESSMENTS: (ClinicalAssessment, self.assessments),
            DOCS_DISPOSITIONS: (Disposition, self.dispositions),
        }
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = self.consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            topic = str(message.topic())
            model, into = kinds[topic]
            into.append(self.serde.decode(message.value(), model, topic=topic))

    def close(self) -> None:
        self.consumer.close()


def unavailable(settings: Settings) -> str | None:
    """Why the rehearsal cannot run here (None: it can): no engine, an image not built, no Compose."""
    if shutil.which("docker-compose") is None:
        return "Debian's docker-compose is not installed (make deploy-check installs it)"
    if not docker_engine_available():
        return "no Docker engine answers (make images provisions one where it can)"
    missing = [name for name in vars(image_names(settings)).values() if not image_exists(name)]
    return f"images not built (make images): {', '.join(missing)}" if missing else None


def rehearse(patients: int = 20, clinical_patients: int = 40, documents: int = 14,
             console: Console | None = None) -> Rehearsal:  # fmt: skip
    """Run the rehearsal of the module docstring; the deployment is down again when it returns."""
    console = console or Console(stderr=True)
    result = Rehearsal()
    settings = get_settings()
    built = build_plan(patients, 0, clinical_patients, documents, console)
    expected, emitted, _ = clinical_reference(built.fhir, built.golden, [])
    plan = replace(built, stages=[], clinical_expected=expected, clinical_outputs=emitted, gates_expected=[])
    serde = make_serde(None)
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clingate-rehearsal-")))
        llm_url = stack.enter_context(_llm_server(plan, scratch))
        deployment = Deployment(scratch, settings, llm_url)
        deployment.compose("down", "-v", "--remove-orphans")  # a previous run's leftovers
        stack.callback(deployment.compose, "down", "-v", "--remove-orphans")
        started = time.monotonic()
        try:
            deployment.compose("up", "-d")
            _wait("every clingate process serving /metrics, the console its sign-in page", _all_serving, 300)
        except (RuntimeError, TimeoutError) as error:
            raise type(error)(f"{error}\n{deployment.logs()}") from error
        result.figures["up_s"] = time.monotonic() - started
        console.print(f"deployment up in {result.figures['up_s']:.0f} s")
        outputs = _Outputs(deployment.principal("clingate-downstream"), serde)
        stack.callback(outputs.close)
        upstream = deployment.principal("clingate-upstream")
        options = {"enable.idempotence": True, "acks": "all", "log_level": QUIET}
        producer = Producer(client_config(BOOTSTRAP, settings=upstream, **options))
        records = _inputs(plan)
        half = len(records) // 2
        _publish(producer, serde, records[:half])
        deployment.compose("kill", KILLED)
        console.print(f"{KILLED} killed after {half} of {len(records)} records")
        _publish(producer, serde, [*records[half:], *_golden(plan)])
        outputs.poll(5.0)
        deployment.compose("start", KILLED)
        console.print(f"{KILLED} started again")
        _await_outputs(plan, outputs, result, timeout_s=300.0)
        result.figures["total_s"] = time.monotonic() - started
        _check_outputs(plan, outputs, result)
        _check_scrapes(result)
        if result.failures:
            console.print(deployment.logs())
    return result


def _expected_candidates(plan: Plan) -> set[str]:
    return {c.candidate_id for found in plan.loop.candidates.values() for c in found}


def _await_outputs(plan: Plan, outputs: _Outputs, result: Rehearsal, timeout_s: float) -> None:
    candidates = _expected_candidates(plan)

    def complete() -> bool:
        outputs.poll(2.0)
        return (
            candidates <= {d.candidate_id for d in outputs.decisions}
            and len(outputs.assessments) >= plan.clinical_outputs
            and {d.request.doc_id for d in plan.documents} <= {d.doc_id for d in outputs.dispositions}
        )

    try:
        result.figures["outputs_s"] = _wait("every output", complete, timeout_s)
    except TimeoutError as error:
        result.failures.append(str(error))
    outputs.poll(5.0)  # anything beyond the expected (a duplicate) shows now


def _check_outputs(plan: Plan, outputs: _Outputs, result: Rehearsal) -> None:
    candidates = _expected_candidates(plan)
    decided = Counter(d.candidate_id for d in outputs.decisions)
    result.figures.update(
        candidates=len(candidates),
        decisions=len(outputs.decisions),
        assessments=len(outputs.assessments),
        dispositions=len(outputs.dispositions),
    )
    missing, unknown = sorted(candidates - set(decided)), sorted(set(decided) - candidates)
    result.check(not missing and not unknown, f"decisions: missing {missing[:3]}, unknown {unknown[:3]}")
    twice = [c for c, n in decided.items() if n > 1]
    result.check(not twice, f"{len(twice)} candidates decided more than once, e.g. {twice[:3]}")
    assessments, emitted = len(outputs.assessments), plan.clinical_outputs
    result.check(assessments == emitted, f"{assessments} assessments, the pure processor emits {emitted}")
    last = {a.patient_id: a for a in outputs.assessments}
    differing = sorted(p for p, a in plan.clinical_expected.items() if last.get(p) != a)
    result.check(not differing, f"the last assessment differs from the pure processor's for {differing[:3]}")
    expected = {d.request.doc_id: _verdict(d.expected.disposition) for d in plan.documents}
    got = Counter(d.doc_id for d in outputs.dispositions)
    repeated = [d for d, n in got.items() if n > 1]
    result.check(
        set(got) == set(expected) and not repeated,
        f"dispositions for {len(got)} of {len(expected)} documents, repeated {repeated[:3]}",
    )
    wrong = [d.doc_id for d in outputs.dispositions if _verdict(d) != expected.get(d.doc_id)]
    result.check(not wrong, f"dispositions differ from the rules-only arbiter's for {wrong[:3]}")


def _verdict(disposition: Disposition) -> tuple[object, ...]:
    """What the rules-only arbiter decides for a document (the demo's comparison)."""
    return disposition.decision, disposition.rule, len(disposition.issues)


def _check_scrapes(result: Rehearsal) -> None:
    """Prometheus scraped every clingate process (the vLLM targets are down without the gpu profile)."""

    def targets() -> list[dict[str, object]]:
        with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/targets", timeout=5) as response:
            return list(json.load(response)["data"]["activeTargets"])

    def all_up() -> bool:
        found = [t for t in targets() if str(t["labels"]["job"]).startswith("clingate")]  # type: ignore[index]
        return len(found) == len(METRICS_PORTS) and all(t["health"] == "up" for t in found)

    try:
        _wait("Prometheus scraping every clingate process", all_up, 60)
    except TimeoutError as error:
        result.failures.append(f"{error}: {targets()}")


def main() -> int:
    """``python -m streams.demo.compose``: rehearse and print the figures; exit 1 on a failed check,
    2 where it cannot run."""
    reason = unavailable(get_settings())
    if reason is not None:
        print(f"compose rehearsal: cannot run: {reason}", file=sys.stderr)
        return 2
    result = rehearse()
    print(json.dumps(result.figures, indent=2))
    for failure in result.failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
