"""Kafka wiring of clingate: the workers' consumer loops, the CLI and the LLM client.

Nothing in here decides anything: every decision is made by a pure processor in
:mod:`processors`; this package decodes records, opens state, calls the processor,
writes state, emits outputs and acknowledges offsets.
"""
