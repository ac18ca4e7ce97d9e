"""One run of the poison suite, end to end (:func:`run_poison`): the plan, the topics and consumer groups,
the runtimes started, the feeding phases in the order :mod:`streams.testing.poison` gives, the report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from schemas.wire import make_serde
from streams.local.broker import free_port
from streams.local.process import http_answers
from streams.replay.kafka import commit_end_offsets, read_state
from streams.requests.runtime import group_id
from streams.runtime.kafka_clients import end_offsets, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings, get_settings
from streams.testing.llm_server import ServerProcess
from streams.testing.poison.plan import build_plan
from streams.testing.poison.records import CLINICAL_FEEDS, RUNTIMES, Scale
from streams.testing.poison.references.llm import llm_reference
from streams.testing.poison.report import OUTPUTS, PoisonReport, build_report
from streams.testing.poison.stages import Service, Stages, environment, read_from, topic_lags
from streams.testing.worker import comparison_engine
from streams.worker import READY
from streams.worker.clinical import clinical_group
from streams.worker.gate import gate_group
from streams.worker.keys import memory_changelog
from streams.worker.memory import memory_group
from topics.admin import ensure_topics
from topics.catalog import (
    CONSOLE_REQUESTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_DISPATCHES,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_REVIEWS,
    build_catalog,
    dlq_name,
)


def run_poison(
    bootstrap: str,
    workdir: Path,
    *,
    scale: Scale,
    seed: int = 7,
    timeout_s: float = 120.0,
    log: Callable[[str], None] = print,
) -> PoisonReport:
    """Run the suite against ``bootstrap`` (:mod:`streams.testing.poison`) and return its report.

    Args:
        bootstrap: the broker; the runtimes are started here as subprocesses, on fresh groups.
        workdir: the worker's data directory and every process's log.
        scale: how many records.
        seed: seeds the good and the bad records.
        timeout_s: longest wait for one phase's commits (a longer wait is reported as a stall).
        log: progress lines.
    """
    started = time.monotonic()
    settings = get_settings()
    serde = make_serde(settings.schema_registry_url)
    ensure_topics(
        admin_client(bootstrap), build_catalog(settings.topic_partitions, settings.topic_replication)
    )
    plan = build_plan(seed, scale, serde, settings.topic_partitions)
    log(
        f"plan {plan.tag}: {sum(len(f) for f in plan.feeds.values()):,} records, drawn in "
        f"{time.monotonic() - started:.1f} s"
    )

    app_id = f"clingate-{plan.tag}"
    groups = dict.fromkeys(CLINICAL_FEEDS, clinical_group(app_id))
    groups |= dict.fromkeys((DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES), memory_group(app_id))
    groups |= {
        DBPM_CANDIDATES: gate_group(app_id),
        DBPM_NARRATIVES: f"{app_id}-generator",
        DBPM_TO_VERIFY: f"{app_id}-verifier",
        DOCS_CLASSIFICATIONS: f"{app_id}-docs",
        DOCS_REVIEWS: f"{app_id}-docs",
        CONSOLE_REQUESTS: group_id(app_id),
    }
    probe = reader(bootstrap, "poison-probe")
    try:
        starts = {t: end_offsets(probe, t) for t in (*OUTPUTS, *(dlq_name(t) for t in RUNTIMES))}
    finally:
        probe.close()
    for topic, group in groups.items():
        if topic != DBPM_TO_VERIFY:  # the verifier's group starts later (:mod:`streams.testing.poison`)
            commit_end_offsets(bootstrap, group, [topic])

    workdir.mkdir(parents=True, exist_ok=True)
    stages = Stages(bootstrap, plan, groups, timeout_s, log)
    services: dict[str, Service] = {}
    server = ServerProcess.start("test", args=["--hashed"])
    llm = {
        "CLINGATE_GENERATOR_URL": server.base_url,
        "CLINGATE_VERIFIER_URL": server.base_url,
        "CLINGATE_GENERATOR_MODEL": server.model,
        "CLINGATE_VERIFIER_MODEL": server.model,
    }
    web_port = free_port()
    try:
        services["worker"] = Service(
            "worker",
            [
                "worker",
                "-l",
                "info",
                "--web-port",
                str(web_port),
                "--datadir",
                str(workdir / app_id),
            ],
            environment(bootstrap, CLINGATE_APP_ID=app_id),
            workdir / "worker.log",
        )
        services["requests"] = Service(
            "requests",
            ["worker", "--role", "requests", "-l", "info", "--web-port", str(free_port()),
             "--datadir", str(workdir / f"{app_id}-requests")],
            environment(bootstrap, CLINGATE_APP_ID=app_id),
            workdir / "requests.log",
        )  # fmt: skip
        services["docs worker"] = Service(
            "docs worker",
            ["arbiter", "worker", "--metrics-port", "0"],
            environment(bootstrap, CLINGATE_DOCS_GROUP_ID=groups[DOCS_CLASSIFICATIONS]),
            workdir / "docs.log",
        )
        services["generator"] = Service(
            "generator",
            ["generator", "--metrics-port", "0"],
            environment(bootstrap, CLINGATE_GENERATOR_GROUP_ID=groups[DBPM_NARRATIVES], **llm),
            workdir / "generator.log",
        )
        # While they start: the LLM groups' reference, on the same server, with the same settings.
        llm_settings = Settings(**llm, CLINGATE_DBPM_CROSS_TASK=False, CLINGATE_DBPM_MAINTENANCE=False)  # type: ignore[arg-type]
        plan.expected += asyncio.run(llm_reference(llm_settings, serde, plan.narratives, plan.decisions))
        services["worker"].wait_for(READY)
        services["requests"].wait_for(READY)
        services["docs worker"].wait_for(b"rules-only")
        log(f"runtimes ready after {time.monotonic() - started:.1f} s (app {app_id})")

        feed_started = time.monotonic()
        dbpm = stages.start((DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES), (DBPM_CANDIDATES,))
        others = [
            stages.start(*((topic,) for topic in CLINICAL_FEEDS)),
            stages.start((DOCS_CLASSIFICATIONS,), (DOCS_REVIEWS,)),
            stages.start((CONSOLE_REQUESTS,)),
        ]
        stages.join(dbpm)
        # The memory the gate decided on, before the verifier's verdicts change it.
        memory = read_state(bootstrap, memory_changelog(app_id), comparison_engine(), None)
        commit_end_offsets(bootstrap, groups[DBPM_TO_VERIFY], [DBPM_TO_VERIFY, DBPM_DECISIONS])
        services["verifier"] = Service(
            "verifier",
            ["verifier", "--metrics-port", "0"],
            # The narratives are published before the to-verify records naming them; the wait only
            # covers a verifier reading a long narrative topic from its beginning on a shared broker.
            environment(
                bootstrap,
                CLINGATE_VERIFIER_GROUP_ID=groups[DBPM_TO_VERIFY],
                CLINGATE_VERIFIER_NARRATIVE_WAIT_S="60",
                **llm,
            ),
            workdir / "verifier.log",
        )
        stages.join(stages.start((DBPM_NARRATIVES, DBPM_TO_VERIFY)), *others)
        # The loop's own traffic settles in pipeline order: the generator's candidates through the gate,
        # the gate's to-verify records and decisions through the verifier, its verdicts into the memory.
        stages.wait(DBPM_CANDIDATES)
        stages.wait(DBPM_TO_VERIFY)
        stages.wait(DBPM_DECISIONS, groups[DBPM_TO_VERIFY])
        stages.wait(DBPM_VERDICTS)
        stages.wait(DBPM_PROPAGATIONS)
        feed_s = time.monotonic() - feed_started
        processes: dict[str, int | None] = {name: s.exit_code for name, s in services.items()}
        processes["llm test server"] = None if http_answers(f"{server.base_url}/models", 10.0) else -1
        lags = topic_lags(bootstrap, groups)
    finally:
        for service in services.values():
            service.terminate()
        for service in services.values():
            service.stop()
        server.stop()
    reads = read_from(bootstrap, starts)
    return build_report(
        plan, stages, reads, memory, lags, processes, seed, feed_s, time.monotonic() - started
    )
