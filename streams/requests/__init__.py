"""The console's requests, carried out: what a person asks the console to write on a topic the console's
principal may not write (a dead letter re-driven to its source topic, an operator's pin on the verdicts).

* :mod:`~streams.requests.check`: what one request writes, or why it is refused (Kafka-free);
* :mod:`~streams.requests.runtime`: the loop that reads ``clingate.console.requests`` and writes what the
  check allows, with an outcome per request, in one transaction (``clingate worker --role requests``).
"""
