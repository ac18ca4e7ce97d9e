"""The Confluent Schema Registry wire format, for processes configured with a registry URL.

Magic byte ``0`` + 4-byte big-endian schema id + Avro binary, through ``confluent_kafka.schema_registry``'s
``AvroSerializer`` / ``AvroDeserializer``. It lives apart from :mod:`schemas.serde` because the registry
client pulls in an HTTP and OAuth stack that every other process would otherwise import for nothing;
:func:`schemas.wire.make_serde` imports this module only when a URL is configured.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from schemas.base import AvroModel
from schemas.registry import SchemaEntry, SchemaRegistry
from schemas.serde import (
    CONFLUENT_MAGIC,
    MALFORMED,
    DatumSerde,
    DecodeReason,
    SchemaDecodeError,
    SchemaEncodeError,
    describe_foreign,
    not_a_datum,
)

with warnings.catch_warnings():
    # The registry client imports authlib's httpx integration, which warns on every import; the warning
    # concerns authlib's own packaging and would otherwise greet every clingate command. authlib installs
    # an "always" filter for its warnings when first imported, so ours must go in after it.
    import authlib.deprecate  # noqa: F401

    warnings.filterwarnings("ignore", message="The httpx module is deprecated")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer


class ConfluentRegistrySerde(DatumSerde):
    """The Confluent Schema Registry wire format through ``confluent_kafka.schema_registry``.

    Schemas are registered on first use under the ``<topic>-value`` subject (the serializer's default),
    in their standalone form. Decoding reads with the expected model's current schema as the reader, so
    the registry's older versions resolve into the current model.
    """

    def __init__(self, client: SchemaRegistryClient, registry: SchemaRegistry | None = None) -> None:
        """Wrap a registry client.

        Args:
            client: e.g. ``SchemaRegistryClient.new_client({"url": url})``.
            registry: the schemas to know; the repository's own by default.
        """
        super().__init__(registry)
        self._client = client
        self._serializers: dict[str, AvroSerializer] = {}
        self._deserializers: dict[str, AvroDeserializer] = {}
        self._writer_names: dict[int, str] = {}

    def _serializer(self, entry: SchemaEntry) -> AvroSerializer:
        serializer = self._serializers.get(entry.full_name)
        if serializer is None:
            # No ``to_dict``: the serializer writes the datum it is given (write_datum's contract).
            serializer = AvroSerializer(self._client, json.dumps(entry.current.schema))
            self._serializers[entry.full_name] = serializer
        return serializer

    def _deserializer(self, entry: SchemaEntry) -> AvroDeserializer:
        deserializer = self._deserializers.get(entry.full_name)
        if deserializer is None:
            deserializer = AvroDeserializer(self._client, json.dumps(entry.current.schema))
            self._deserializers[entry.full_name] = deserializer
        return deserializer

    def _writer_name(self, schema_id: int) -> str:
        name = self._writer_names.get(schema_id)
        if name is None:
            try:
                registered = self._client.get_schema(schema_id)
            except Exception as exc:  # the client raises its own error types per transport
                raise SchemaDecodeError(
                    DecodeReason.UNKNOWN_SCHEMA, f"registry has no schema id {schema_id}: {exc}"
                ) from exc
            try:
                name = str(json.loads(registered.schema_str)["name"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SchemaDecodeError(
                    DecodeReason.UNKNOWN_SCHEMA, f"schema id {schema_id} is not a named Avro record"
                ) from exc
            self._writer_names[schema_id] = name
        return name

    def write_datum(self, datum: Any, model: type[AvroModel], *, topic: str | None = None) -> bytes:
        """The Confluent wire format of ``datum`` (:meth:`~schemas.serde.Serde.write_datum`), registering
        ``model``'s schema under ``<topic>-value``.

        Raises:
            ValueError: no topic given (the subject is derived from it).
            SchemaEncodeError: the datum holds a value its schema cannot carry.
        """
        if topic is None:
            raise ValueError("the registry wire format needs the topic to name the subject")
        entry = self._registry.for_model(model)
        try:
            data = self._serializer(entry)(datum, SerializationContext(topic, MessageField.VALUE))
        except SerializationError as exc:
            raise SchemaEncodeError(f"{entry.full_name}: {exc}") from exc
        assert data is not None  # a datum is never serialised as a tombstone
        return data

    def _read(
        self, data: bytes, expected: type[AvroModel] | None, topic: str | None
    ) -> tuple[SchemaEntry, Any]:
        if len(data) < 5 or data[0] != CONFLUENT_MAGIC:
            raise SchemaDecodeError(
                DecodeReason.BAD_MAGIC, f"not the registry wire format: {describe_foreign(data)}"
            )
        writer = self._writer_name(int.from_bytes(data[1:5], "big"))
        entry = self._registry.entries.get(writer)
        if entry is None:
            raise SchemaDecodeError(DecodeReason.UNKNOWN_SCHEMA, f"{writer} is not a clingate schema")
        if expected is not None and writer != expected.avro_name:
            raise SchemaDecodeError(
                DecodeReason.WRONG_SCHEMA,
                f"expected {expected.avro_name}, the record was written as {writer}",
                writer=writer,
            )
        context = SerializationContext(topic or "", MessageField.VALUE)
        try:
            datum = self._deserializer(entry)(data, context)
        except (SerializationError, *MALFORMED) as exc:
            raise not_a_datum(writer, exc) from exc
        return entry, datum


def registry_serde(url: str) -> ConfluentRegistrySerde:
    """The registry serde on a client for ``url`` (``mock://<scope>``: the library's in-memory registry)."""
    return ConfluentRegistrySerde(SchemaRegistryClient.new_client({"url": url}))
