"""``clingate demo``: every part of clingate as its own process on a real broker, fed and checked."""
