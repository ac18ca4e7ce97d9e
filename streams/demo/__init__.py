"""``clingate demo``: every part of clingate as its own process on a real broker, fed and checked.

``command`` (the CLI and the step sequence) runs: ``plan`` (the inputs and their in-process
references), ``broker`` (step 1), ``samples`` (step 2), ``streams`` (step 3: ``services`` started,
``feed`` producing, ``tap`` watching, ``progress`` bars), ``checks`` (steps 4-6), ``dead_letters``
(step 7), ``model`` (step 8), ``summary`` and ``report`` (step 9), with ``kafka_io`` (the demo's own
records), ``results`` (what the steps found), ``llm`` (the test server's ground-truth responder) and
``data`` (the bundled inputs).
"""
