"""``clingate console``: the application around the real Kafka parts, served until SIGINT or SIGTERM.

What holds: the site is up (its socket listening) before ``listening http://HOST:PORT`` is printed, with
the port actually bound (``--port 0`` picks a free one), so a script or a test may connect as soon as it
reads that line. It serves plain HTTP on the host it is given, 127.0.0.1 unless told otherwise: people on
other machines reach it through a TLS reverse proxy (docs/console.md). On a stop signal it stops taking
requests, lets those under way finish, and sends the audit records and requests still queued.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from aiohttp import web

from processors.dbpm import DBPMEngine, load_ontology
from schemas.wire import make_serde
from streams.console.agent_topics import KafkaAgent
from streams.console.app import AccessLogger, build_app
from streams.console.assessments import KafkaAssessments
from streams.console.audit import KafkaAuditTrail
from streams.console.auth import Access
from streams.console.dead_letter_queues import KafkaDeadLetters
from streams.console.drafts import KafkaDrafts
from streams.console.history import KafkaHistory
from streams.console.memory import Explorer
from streams.console.memorylog import KafkaMemory, KafkaPinPublisher
from streams.console.requests import KafkaRequests
from streams.console.reviews import KafkaReviews
from streams.console.sessions import Sessions, SignInThrottle
from streams.console.touchpoint_topics import KafkaTouchpoints
from streams.console.users import PasswordChecks, UserStore, decoy_hash
from streams.runtime.settings import Settings
from streams.worker.engine import dbpm_config


def url(host: str, port: int) -> str:
    """The console's address as a browser takes it (an IPv6 host in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(
    settings: Settings, bootstrap: str, host: str, port: int, announce: Callable[[str], None]
) -> None:
    """Serve the console on ``host:port`` until SIGINT or SIGTERM; ``announce`` gets its URL once it is up."""
    serde = make_serde(settings.schema_registry_url)
    access = Access(
        users=UserStore(settings.console_users_file),
        sessions=Sessions(settings.console_session_s, settings.console_idle_s),
        throttle=SignInThrottle(),
        checks=PasswordChecks(),
        secure_cookies=settings.console_secure_cookies,
        trusted_proxies=settings.console_trusted_proxies,
    )
    trail = KafkaAuditTrail(bootstrap, serde)
    requests = KafkaRequests(bootstrap, serde)
    agent_desk = KafkaAgent(bootstrap, serde)
    config = dbpm_config(settings)  # the workers' (CLINGATE_DBPM_*): decay, weights, thresholds
    pins = KafkaPinPublisher(requests, serde, DBPMEngine(config, load_ontology()))
    explorer = Explorer(KafkaMemory(bootstrap, serde, settings.app_id), pins, config)
    reviews = KafkaReviews(bootstrap, serde)
    app = build_app(
        access,
        trail,
        KafkaAssessments(bootstrap, serde),
        reviews,
        history=KafkaHistory(bootstrap, serde),
        dead_letter_source=KafkaDeadLetters(bootstrap, serde),
        requests=requests,
        agent_desk=agent_desk,
        drafts=KafkaDrafts(bootstrap, serde),
        explorer=explorer,
        touchpoint_source=KafkaTouchpoints(bootstrap, serde),
    )
    runner = web.AppRunner(app, access_log_class=AccessLogger)
    await runner.setup()
    try:
        await asyncio.to_thread(decoy_hash)  # made before the first sign-in, so that it costs no more
        site = web.TCPSite(runner, host, port)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        bound = runner.addresses[0][1]
        announce(url(host, bound))
        await stop.wait()
    finally:
        await runner.cleanup()
        trail.close()
        reviews.close()
        requests.close()
        access.checks.close()
