"""Throughput of the serde: encode and decode records per second, per event type, on one core.

Each event type gets one representative instance (:func:`streams.testing.schema_samples.samples`: the
replay contract's examples for the DBPM events, a small FHIR Observation, a dead letter of a 1 KiB
value). A point encodes it ``n`` times, then decodes the bytes ``n`` times (decode includes the pydantic
validation, as in a consumer), after a warm-up of ``n // 10``. Single-object encoding is measured; the
registry wire format adds a schema-id lookup that is cached after the first record, so it costs the same
per record.

Beside them, the Avro binary alone, as the hot paths meet it: the model's datum written and read by the
serde's :class:`~schemas.serde.Codec` (the code compiled for the schema) and by fastavro's own writer
and reader, in µs per datum.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import fastavro
import typer
from rich.console import Console
from rich.table import Table

from schemas.base import AvroModel
from schemas.registry import load_registry
from schemas.serde import Codec, SingleObjectSerde, datum_adapter, model_datum
from streams.testing.schema_samples import samples


@dataclass(frozen=True, slots=True)
class SerdePoint:
    """Throughput of one event type."""

    event: str
    size_bytes: int
    encode_per_s: float
    decode_per_s: float
    codec_write_us: float
    fastavro_write_us: float
    codec_read_us: float
    fastavro_read_us: float


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
    return SerdePoint(model.avro_name, len(data), n / encode_s, n / decode_s, *_datum_us(model, n))


def _datum_us(model: AvroModel, n: int) -> tuple[float, float, float, float]:
    """µs per datum of ``model``: written by the codec, by fastavro; read by the codec, by fastavro."""
    version = load_registry().for_model(type(model)).current
    codec = Codec(version)
    datum = model_datum(model, datum_adapter(version.parsed))
    body = codec.write(datum)

    def fastavro_write() -> None:
        fastavro.schemaless_writer(io.BytesIO(), version.parsed, datum)

    def fastavro_read() -> None:
        fastavro.schemaless_reader(io.BytesIO(body), version.parsed, None)

    ways = (lambda: codec.write(datum), fastavro_write, lambda: codec.read(body, 0, None), fastavro_read)
    return tuple(_us(way, n) for way in ways)  # type: ignore[return-value]


def _us(way: Callable[[], object], n: int) -> float:
    for _ in range(max(n // 10, 1)):
        way()
    start = time.perf_counter()
    for _ in range(n):
        way()
    return (time.perf_counter() - start) / n * 1e6


def schemas(
    n: Annotated[int, typer.Option("-n", help="Records per measurement.")] = 20_000,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the points as JSON.")] = None,
) -> None:
    """Records/s of single-object encode and decode (with validation) per event type."""
    serde = SingleObjectSerde()
    points = [measure(serde, model, n) for model in samples()]
    table = Table(title=f"Serde throughput, one core, n={n}")
    columns = ("event", "bytes", "encode/s", "decode/s", "write µs", "fastavro", "read µs", "fastavro")
    for column in columns:
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(
            p.event, str(p.size_bytes), f"{p.encode_per_s:,.0f}", f"{p.decode_per_s:,.0f}",
            f"{p.codec_write_us:.1f}", f"{p.fastavro_write_us:.1f}", f"{p.codec_read_us:.1f}",
            f"{p.fastavro_read_us:.1f}",
        )  # fmt: skip
    Console(width=160).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(p) for p in points], indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(schemas)
