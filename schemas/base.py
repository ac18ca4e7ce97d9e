"""The base of every event model.

Convention (every event clingate reads or writes follows it):

* the Avro schema lives in ``schemas/avro/<area>/<Name>.avsc`` with full name ``clingate.<area>.<Name>``;
* the pydantic model mirroring it is ``schemas.<area>.<Name>``, a subclass of :class:`AvroModel` whose
  ``avro_name`` is that full name;
* ``model.model_dump(mode="json")`` MUST produce a datum that the Avro schema accepts, and validating that
  datum back MUST give an equal model (the round-trip property test checks every registered model).

Free-form JSON documents (a FHIR resource, a relation payload of an open task) travel as Avro strings
holding JSON, so the schema stays stable while the document evolves.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class AvroModel(BaseModel):
    """A frozen event model bound to one Avro schema by its full name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    avro_name: ClassVar[str]
