"""Clinical knowledge data (YAML); read by :func:`processors.clinical.knowledge.load_knowledge`."""
