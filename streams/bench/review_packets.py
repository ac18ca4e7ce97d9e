"""Review packets for the console benchmarks: the demo's examples that the rules-only arbiter escalates."""

from __future__ import annotations

from collections.abc import Iterator

from schemas.docs import ReviewPacket
from streams.demo.plan import verify_example

EXAMPLES = ("fabricated", "quest", "requisition")
"""The demo's classification examples whose verification ends in a review packet."""


def packets(count: int) -> Iterator[ReviewPacket]:
    """``count`` review packets: the demo's escalated examples in turn, each under a document id of its
    own."""
    examples = []
    for case in EXAMPLES:
        packet = verify_example(case)[1].packet
        if packet is None:
            raise RuntimeError(f"the rules-only arbiter no longer escalates the {case} example")
        examples.append(packet)
    for i in range(count):
        yield examples[i % len(examples)].model_copy(update={"doc_id": f"bench-doc-{i:06d}"})
