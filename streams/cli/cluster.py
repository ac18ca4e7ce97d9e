"""``clingate cluster start|stop|status|reset``: several native KRaft brokers on loopback as one cluster.

The multi-node form of ``clingate broker`` (:mod:`streams.local.cluster`): ``start --brokers 3``
runs three nodes in ``CLINGATE_CLUSTER_DIR`` (default ``<CLINGATE_HOME>/cluster``), each broker and
controller, with three replicas and
``min.insync.replicas`` 2 for the internal and default topics, as the deployment in ``deploy/`` has.
``start`` prints only the bootstrap list on stdout, so
``export KAFKA_BOOTSTRAP_SERVERS=$(clingate cluster start --brokers 3)`` works; create the catalog with
``CLINGATE_TOPIC_REPLICATION=3 clingate topics create``.
"""

from __future__ import annotations

import shutil
from typing import Annotated

import typer
from rich.console import Console

from streams.local.broker import BrokerError
from streams.local.cluster import local_cluster
from streams.runtime.settings import get_settings

app = typer.Typer(
    help="Run several native KRaft brokers on 127.0.0.1 as one Kafka cluster.", no_args_is_help=True
)
_err = Console(stderr=True)

# LSB init-script convention: status exits 3 when the service is not running.
_NOT_RUNNING = 3


@app.command()
def start(
    brokers: Annotated[int, typer.Option(min=1, help="How many nodes (each a broker and a controller).")] = 3,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every node to answer.")] = 120.0,
) -> None:
    """Start the cluster's nodes (first run: fetch the locked jars) and print the bootstrap list."""
    cluster = local_cluster(get_settings(), brokers)
    try:
        bootstrap = cluster.start(timeout=timeout)
    except BrokerError as error:
        _err.print(f"[red]{error}[/red]", markup=True, highlight=False)
        raise typer.Exit(1) from error
    _err.print(f"Kafka cluster of {brokers} running (directory: {cluster.directory})", highlight=False)
    print(bootstrap)


@app.command()
def stop(
    timeout: Annotated[float, typer.Option(help="Seconds per node for a clean shutdown.")] = 30.0,
) -> None:
    """Stop every node and wait until their JVMs have exited."""
    if local_cluster(get_settings()).stop(timeout=timeout):
        _err.print("Kafka cluster stopped")
    else:
        _err.print("Kafka cluster was not running")


@app.command()
def status() -> None:
    """Report each node (pid, address, log); exit 0 when every node runs, 3 when none or only some do."""
    states = local_cluster(get_settings()).status()
    for node_id, state in enumerate(states, start=1):
        if state.running:
            print(f"node {node_id}: running pid={state.pid} bootstrap={state.bootstrap} log={state.log_file}")
        else:
            print(f"node {node_id}: stopped (directory {state.directory})")
    if not all(state.running for state in states):
        raise typer.Exit(_NOT_RUNNING)


@app.command()
def reset() -> None:
    """Delete the stopped cluster's data (every node, topic and record); refuses while a node runs."""
    cluster = local_cluster(get_settings())
    if cluster.running:
        _err.print("A node of the cluster is running: `clingate cluster stop` first.")
        raise typer.Exit(1)
    shutil.rmtree(cluster.directory, ignore_errors=True)
    _err.print(f"Removed {cluster.directory}")
