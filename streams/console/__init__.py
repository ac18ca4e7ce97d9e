"""The console: the web pages of the people in the loop, served by ``clingate console``.

One module per concern:

* :mod:`~streams.console.users`: users, roles, the password policy, scrypt password hashes checked on a
  pool of their own, the users file;
* :mod:`~streams.console.sessions`: server-side sessions with their CSRF tokens, the sign-in throttle;
* :mod:`~streams.console.auth`: the guard of every request (session cookie, CSRF, roles), sign-in and
  sign-out;
* :mod:`~streams.console.audit`: one record per action on ``clingate.console.audit``;
* :mod:`~streams.console.metrics`: the requests refused before sign-in, counted at ``/metrics``;
* :mod:`~streams.console.assessments`: the assessments the clinical workers published, read from Kafka;
* :mod:`~streams.console.drafts`: the output gates' gated drafts and routes read from Kafka, grouped in
  runs;
* :mod:`~streams.console.pharmacist`: the pharmacist's board and patient pages;
* :mod:`~streams.console.touchpoint_topics`: the runs' query proposals and evidence bundles, and the
  pharmacist's decisions and reviews of them, read from Kafka;
* :mod:`~streams.console.touchpoints`: the pharmacist's Query Gate and Evidence Review;
* :mod:`~streams.console.reviews`: the review packets and reviews read from Kafka;
* :mod:`~streams.console.corrections`: an SME's correction of segments and mixture, read from the form;
* :mod:`~streams.console.sme`: the SME's review queue, packet page and decision;
* :mod:`~streams.console.memorylog`: the DBPM topics and memory changelog read from Kafka, and the
  operators' pins asked for;
* :mod:`~streams.console.memory`: the operator's memory explorer and pins;
* :mod:`~streams.console.dead_letter_queues`: the ``.dlq`` topics read from Kafka;
* :mod:`~streams.console.dead_letters`: the operator's dead-letter pages and re-drive;
* :mod:`~streams.console.requests`: every record its people make (a re-drive, a pin, a review, a question,
  a pharmacist's decision), published as a request for the request runtime (:mod:`streams.requests`): the
  console's principal writes no input topic;
* :mod:`~streams.console.history`: the re-drives, questions and pharmacist's decisions asked for, read back
  from the audit trail, and what the request runtime did with each request;
* :mod:`~streams.console.agent_topics`: the agent's topics (a turn read back);
* :mod:`~streams.console.agent`: the clinician's agent pages;
* :mod:`~streams.console.delivery`: a record produced for a person and awaited until Kafka acknowledged it;
* :mod:`~streams.console.records`: a topic's records read for a page;
* :mod:`~streams.console.pages`: templates, navigation and the error of an unavailable page;
* :mod:`~streams.console.app`: the aiohttp application (routes, middlewares, response headers);
* :mod:`~streams.console.server`: the application on the real Kafka parts, served until stopped.

The pages are Jinja2 templates (``templates/``) and one stylesheet (``static/``): plain HTML forms, no
script, no front-end build, nothing fetched from the internet. docs/console.md describes what is built and
what is not yet.
"""
