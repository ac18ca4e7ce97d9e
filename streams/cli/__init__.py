"""The ``clingate`` command line: one sub-command group per module under :mod:`streams.cli`.

A group's module is imported only when that group runs or shows its own help: ``clingate --help`` lists
every group from :data:`COMMANDS` without importing any, and ``clingate replay ...`` imports the replay
command and what it runs, never the workers, the benchmarks or the demo. Each command module in turn
keeps what only some of its commands need inside those commands. A group's one-line help is written
here, beside its module's name, so that listing costs no import; a test holds it equal to the module's.
"""

from __future__ import annotations

import gc
import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Entry:
    """A command group of ``clingate``: its module (with a Typer ``app``) and its one-line help."""

    module: str
    help: str
    hidden: bool = False


COMMANDS: dict[str, Entry] = {
    "agent": Entry("streams.cli.agent", "The clinician's agent: worker, one-shot questions, trace replay."),
    "arbiter": Entry(
        "streams.cli.arbiter", "Classification arbiter: verify classifications, render review packets."
    ),
    "bench": Entry("streams.cli.bench", "Benchmarks of each area: throughput, per-event cost, size."),
    "broker": Entry("streams.cli.broker", "Run a native single-node Kafka broker (KRaft) on 127.0.0.1."),
    "clinical": Entry("streams.cli.clinical", "Deterministic clinical gates on FHIR R4."),
    "cluster": Entry(
        "streams.cli.cluster", "Run several native KRaft brokers on 127.0.0.1 as one Kafka cluster."
    ),
    "config": Entry(
        "streams.cli.config",
        "Show every setting: environment variable, default, current value, meaning.",
    ),
    "console": Entry(
        "streams.cli.console",
        "The web console of the people in the loop: sign-in with roles, the pharmacist board.",
    ),
    "demo": Entry("streams.demo.command", "Run clingate end to end on a Kafka broker and write report.html."),
    "generator": Entry("streams.cli.generator", "Run a generator group member (narratives -> candidates)."),
    "llm": Entry(
        "streams.cli.llm",
        "LLM serving: per-role status, a local OpenAI-compatible server, the in-process vLLM check.",
    ),
    "replay": Entry("streams.cli.replay", "Replay a DBPM event stream (JSON Lines) through the engine."),
    "schemas": Entry(
        "streams.cli.schemas", "The Avro schemas of clingate's topics, for clients in any language."
    ),
    "topics": Entry("streams.cli.topics", "Create the catalog's topics on a cluster, or describe them."),
    "verifier": Entry(
        "streams.cli.verifier", "Run a verifier group member (to-verify -> verdicts, verified)."
    ),
    "worker": Entry("streams.cli.worker", "Run a stream worker (DBPM memory and gate, clinical patients)."),
    # The arbiter's former name, kept for existing scripts.
    "docs": Entry(
        "streams.cli.arbiter",
        "Classification arbiter: verify classifications, render review packets.",
        hidden=True,
    ),
}
"""Every command group, by name."""


def load(name: str) -> typer.Typer:
    """The Typer app of command group ``name`` (its module imported now)."""
    return importlib.import_module(COMMANDS[name].module).app


class _LazyGroup(TyperGroup):
    """A command group known by name and help until it runs: then its module is imported and it parses."""

    def __init__(self, name: str, entry: Entry) -> None:
        super().__init__(name=name, help=entry.help, hidden=entry.hidden)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        """The context of the real group: click invokes ``context.command``, which is that group.

        The logs are configured once the arguments parsed (:func:`configure_logs`), so a help request,
        which exits while they parse, loads no settings.
        """
        assert self.name is not None
        command = typer.main.get_command(load(self.name))
        command.name = self.name
        context = command.make_context(info_name, args, parent=parent, **extra)
        configure_logs()
        return context


class _Root(TyperGroup):
    """``clingate``: its sub-commands are the groups of :data:`COMMANDS`, loaded on use."""

    def list_commands(self, ctx: Any) -> list[str]:
        """Every group name, in the order of :data:`COMMANDS`."""
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> TyperGroup | None:
        """A stand-in for group ``cmd_name`` that imports it only when it runs."""
        entry = COMMANDS.get(cmd_name)
        return None if entry is None else _LazyGroup(cmd_name, entry)


ROOT_FLAGS_OFF: dict[str, bool] = {"help": False, "install_completion": False, "show_completion": False}
"""``clingate``'s own flags when not given: off, as bools (Typer's defaults for them are ``None``).

Given as the root context's ``default_map`` (click's defaults by parameter name). Before a group runs,
its parent's parameters are converted, and Typer converts a value that is not a bool with a Pydantic
adapter it builds on first use: with ``None`` flags every ``clingate GROUP ...`` would import Pydantic,
which is most of what ``clingate replay --help`` would cost beyond ``clingate --help``
(docs/performance.md). A bool passes unconverted, so ``clingate GROUP --help`` imports Pydantic only if
the group's module does (the help of a group's sub-command still converts that group's own ``--help``)."""


app = typer.Typer(
    name="clingate",
    cls=_Root,
    help="clingate: gated decisions for clinical LLM pipelines on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"default_map": ROOT_FLAGS_OFF},
)


GC_THRESHOLDS = (20_000, 10, 10)
"""The cyclic collector's thresholds in every clingate process (CPython's default: 700, 10, 10).

The stream processes allocate many short-lived objects per record (decoded models, futures, rows),
which reference counting frees; at 700 allocations per young collection the collector also ran
thousands of times a second, and in the demo's bulk phase it took 10% of the generator's CPU and a
quarter of the demo's own (py-spy ``--native``: ``gc_collect_main``), whose downstream view keeps
every output it consumed, so that each older collection walked more of them. Cycles are still
collected, 28 times less often."""


@app.callback()
def _collector() -> None:
    # Before anything else of any command: the cyclic collector's thresholds.
    gc.set_threshold(*GC_THRESHOLDS)


def configure_logs() -> None:
    """Once per process, before a command runs: the logs' format and level from the settings
    (:mod:`streams.runtime.logs`)."""
    from streams.runtime.logs import configure
    from streams.runtime.settings import get_settings

    settings = get_settings()
    configure(settings.log_level, settings.log_format)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
