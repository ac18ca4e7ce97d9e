"""Several KRaft nodes on loopback as one Kafka cluster (``clingate cluster``; the integration tests').

Each node is a :class:`~streams.local.broker.LocalKafka` in its own directory (``node-1`` ...
``node-N``), running broker and controller in one JVM (KRaft combined mode), natively or, given
clingate's Kafka image, in a container on the host's network started through testcontainers. Every
node is a voter of the controller quorum, so the cluster has a controller while a majority of its
nodes runs. Ports and the cluster id are chosen at the first start and kept in each node's state file:
a node stopped or killed comes back at the same address, and the bootstrap list never changes.

Replication follows the deployment (``deploy/``): internal topics (consumer offsets, transaction
state) and new topics get ``min(N, 3)`` replicas and ``min.insync.replicas`` of
:func:`topics.catalog.min_insync_replicas` (2 from three replicas on), so a producer with
``acks=all`` keeps writing through the loss of any one broker of three. The catalog's own topics take
their replication from ``CLINGATE_TOPIC_REPLICATION``.

The nodes start in parallel: a node is ready only once the quorum elected a controller, which needs
a majority of the voters up.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streams.local.broker import (
    BrokerError,
    BrokerStatus,
    LocalKafka,
    free_port,
    new_cluster_id,
    wait_for_kafka,
)
from streams.runtime.settings import MAVEN_CENTRAL, Settings
from topics.catalog import min_insync_replicas

#: Replicas of the internal and default topics: the deployment's three, fewer on a smaller cluster.
MAX_REPLICATION = 3


class LocalCluster:
    """``size`` native KRaft nodes under ``directory`` forming one cluster (module docstring).

    Args:
        directory: The cluster's directory; node ``i`` lives in ``node-i``.
        size: How many nodes (brokers and controllers); fixed by the first start.
        home: The clingate cache directory holding the jar cache.
        repository: The Maven repository the jars are fetched from.
        image: Run every node in a container of this image (:func:`~streams.local.images.kafka_image`);
            None: natively.
    """

    def __init__(
        self, directory: Path, size: int, home: Path, repository: str = MAVEN_CENTRAL,
        image: str | None = None,
    ) -> None:  # fmt: skip
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.directory = directory.absolute()
        self.size = size
        replicas = min(size, MAX_REPLICATION)
        replication, min_isr = str(replicas), str(min_insync_replicas(replicas))
        self._common = {
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
        }
        self.nodes = [
            LocalKafka(self.directory / f"node-{i}", home=home, repository=repository, image=image)
            for i in self.node_ids
        ]

    @property
    def node_ids(self) -> range:
        """The nodes' ids, 1 to ``size``."""
        return range(1, self.size + 1)

    def node(self, node_id: int) -> LocalKafka:
        """The node with id ``node_id``, configured as a member of this cluster (so that it can be
        stopped, killed and started on its own)."""
        self._configure()
        return self.nodes[node_id - 1]

    def _plan(self) -> str:
        """Choose every node's ports and the cluster id once (kept in the nodes' state files) and return
        the quorum's voters."""
        if not all(node.state() for node in self.nodes):
            cluster_id = new_cluster_id()
            taken: list[int] = []
            for node in self.nodes:
                port = free_port(taken=tuple(taken))
                controller_port = free_port(taken=(*taken, port))
                taken += [port, controller_port]
                node.reserve(port, controller_port, cluster_id)
        return ",".join(
            f"{i}@127.0.0.1:{node.state()['controller_port']}"
            for i, node in zip(self.node_ids, self.nodes, strict=True)
        )

    def _configure(self) -> None:
        """Give every node its id, the quorum's voters and the cluster's replication settings."""
        voters = self._plan()
        for node_id, node in zip(self.node_ids, self.nodes, strict=True):
            node.extra_properties = {
                **self._common, "node.id": str(node_id), "controller.quorum.voters": voters,
            }  # fmt: skip

    def start(self, timeout: float = 120.0) -> str:
        """Start every node that is not running, in parallel, and wait until each answers.

        Returns:
            The bootstrap list, ``127.0.0.1:<port>`` of every node, comma-separated.

        Raises:
            BrokerError: a node did not start (the message carries the tail of its log); the nodes
                this call started are stopped again.
        """
        held = nodes_held(self.directory)
        if held and held != self.size:
            raise BrokerError(
                f"the cluster in {self.directory} has {held} nodes, not {self.size}: stop and reset it "
                "(clingate cluster stop; clingate cluster reset) to change its size"
            )
        self._configure()
        waiting = [node for node in self.nodes if node.bootstrap is None]
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            futures = [pool.submit(node.start, None, timeout) for node in waiting]
            errors = [str(exc) for exc in (f.exception() for f in futures) if exc is not None]
        try:
            if errors:
                raise BrokerError("\n".join(errors))
            # Every node's own metadata view: a node that lags behind the quorum lists fewer brokers.
            for node in self.nodes:
                wait_for_kafka(f"127.0.0.1:{node.state()['port']}", timeout, brokers=self.size)
        except BrokerError as error:
            for node in waiting:
                node.stop()
            raise BrokerError(f"the local cluster did not start: {error}") from error
        return self.bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address (running or not): a client finds whichever nodes are up."""
        return ",".join(f"127.0.0.1:{node.state()['port']}" for node in self.nodes)

    @property
    def running(self) -> bool:
        """Whether any node runs."""
        return any(node.bootstrap is not None for node in self.nodes)

    def status(self) -> list[BrokerStatus]:
        """Each node's status, by id."""
        return [node.status() for node in self.nodes]

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node (in parallel, each waited for); True if any was running."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            return any(list(pool.map(lambda node: node.stop(timeout), self.nodes)))


def local_cluster(settings: Settings, size: int | None = None) -> LocalCluster:
    """The cluster ``clingate cluster start|stop|status`` manages (default ``<home>/cluster``).

    Args:
        settings: supplies ``cluster_dir``, the cache ``home`` and the Maven repository.
        size: how many nodes; None: as many as the directory holds (at least one).
    """
    directory = settings.cluster_dir or settings.home / "cluster"
    size = size if size is not None else max(1, nodes_held(directory))
    return LocalCluster(directory, size, home=settings.home, repository=settings.maven_repository)


def nodes_held(directory: Path) -> int:
    """How many node directories the cluster in ``directory`` has (0 before its first start)."""
    return sum(1 for _ in directory.glob("node-*"))
