"""``clingate worker``: the DBPM memory, the clinical patients and the DBPM gate, each a consumer loop."""

#: What a worker logs once its loops have started (as bytes: tests and the demo wait for it); each loop
#: then joins its group and restores its partitions.
READY = b"clingate worker ready"
