"""The classification arbiter: V1–V4 verification, V5, auto-fix, retries, review packets.

Entry points: :func:`processors.docs.arbiter.start` / :func:`~processors.docs.arbiter.resume` (the pure
step machine whose LLM phases are requests), :func:`processors.docs.arbiter.run` (synchronous driver),
:func:`processors.docs.v3.load_trap_rules` (V3's rule data) and :func:`processors.docs.packet.ground_truth`.
"""
