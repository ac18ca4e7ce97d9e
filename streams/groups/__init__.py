"""Consumer groups on the ordered loop: the LLM generator and verifier, the classification arbiter."""
