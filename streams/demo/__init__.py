"""``clingate demo``: every part of clingate as its own process on a real broker, fed and checked.

``command`` (the CLI and the step sequence) runs: ``plan`` (the inputs and their in-process
references), ``broker`` (step 1), ``samples`` (step 2), ``streams`` (step 3: ``services`` started,
``feed`` producing, ``tap`` watching, ``progress`` bars), ``checks`` (steps 4-6; ``runs`` and
``gate_runs`` the golden runs through the output gates), ``agent`` (step 7), ``dead_letters`` (step 8),
``console_pages`` (step 9), ``model`` (step 10), ``summary`` and ``report`` (step 11, its SVG charts
from :mod:`streams.charts`), with ``kafka_io`` (the demo's own records), ``results`` (what the steps
found) and ``llm`` (the test server's ground-truth responder); the bundled inputs are :mod:`streams.data`.
``compose`` runs the demo's streams through the compose deployment (``make compose-check``).
"""
