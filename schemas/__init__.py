"""Event schemas: Avro ``.avsc`` files, the pydantic models that mirror them, and the serde."""
