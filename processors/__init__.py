"""Pure, synchronous, deterministic decision logic.

Every processor has the shape ``(state, event, now) -> (new_state, outputs)``:

* no I/O (no Kafka, no files, no HTTP, no RocksDB handle of its own),
* no clock reads: ``now`` is the event time carried by the record,
* same input, same output, so a replay of the log reproduces every decision.

Ruff's banned-api rules enforce the first two for this package (see pyproject.toml).
"""
