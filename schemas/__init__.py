"""Event schemas: Avro ``.avsc`` files, the pydantic models that mirror them, and the serde.

* :mod:`schemas.base`: the model/schema convention (read it before adding an event), ``EventTime``,
  ``JsonText``, ``RawBytes``.
* ``schemas/avro/<area>/<Name>.avsc`` + ``schemas/<area>.py``: the events of each area.
* :mod:`schemas.registry`: discovers and cross-checks them (fingerprints, released versions).
* :mod:`schemas.serde`: ``make_serde(settings.schema_registry_url)`` -> ``encode`` / ``decode``.
* ``python -m schemas.release``: snapshot changed schemas as new released versions (refuses
  backward-incompatible changes); commit the snapshots under ``schemas/avro/_released/``.
"""
