"""The clinician's agent's runtime: tools, the graph runner, the worker."""
