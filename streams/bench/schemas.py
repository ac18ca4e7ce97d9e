"""Throughput of the serde: encode and decode records per second, per event type, on one core.

Each event type gets one representative instance (:func:`streams.testing.schema_samples.samples`: the
replay contract's examples for the DBPM events, a small FHIR Observation, a dead letter of a 1 KiB
value). A point encodes it ``n`` times, then decodes the bytes ``n`` times (decode includes the pydantic
validation, as in a consumer), after a warm-up of ``n // 10``. Single-object encoding is measured; the
registry wire format adds a schema-id lookup that is cached after the first record, so it costs the same
per record.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from schemas.base import AvroModel
from schemas.serde import SingleObjectSerde
from streams.testing.schema_samples import samples


@dataclass(frozen=True, slots=True)
class SerdePoint:
    """Throughput of one event type."""

    event: str
    size_bytes: int
    encode_per_s: float
    decode_per_s: float


def measure(serde: SingleObjectSerde, model: AvroModel, n: int) -> SerdePoint:
    """Encode then decode ``model`` ``n`` times each."""
    kind = type(model)
    data = serde.encode(model)
    for _ in range(max(n // 10, 1)):
        serde.decode(serde.encode(model), kind)
    start = time.perf_counter()
    for _ in range(n):
        serde.encode(model)
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n):
        serde.decode(data, kind)
    decode_s = time.perf_counter() - start
    return SerdePoint(model.avro_name, len(data), n / encode_s, n / decode_s)


def schemas(
    n: Annotated[int, typer.Option("-n", help="Records per measurement.")] = 20_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the points as JSON.")] = None,
) -> None:
    """Records/s of single-object encode and decode (with validation) per event type."""
    serde = SingleObjectSerde()
    points = [measure(serde, model, n) for model in samples()]
    table = Table(title=f"Serde throughput, one core, n={n}")
    for column in ("event", "bytes", "encode/s", "decode/s"):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(p.event, str(p.size_bytes), f"{p.encode_per_s:,.0f}", f"{p.decode_per_s:,.0f}")
    Console(width=120).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(p) for p in points], indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(schemas)
