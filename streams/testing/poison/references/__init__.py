"""The poison suite's references, one module per family of topics: the family's good records and the
outputs the deployed pure code gives them in process, which the runtimes' outputs must equal record for
record. :mod:`.dbpm` (verdicts, propagations, candidates), :mod:`.clinical` (the clinical loop's inputs),
:mod:`.docs` (classifications and reviews), :mod:`.requests` (the console's requests), :mod:`.llm`
(narratives and to-verify records, for the LLM groups); :mod:`.common`: what they share.
"""
