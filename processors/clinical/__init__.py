"""Deterministic clinical gates on FHIR R4 (issue 5): pure processors.

Source: PharmMesh escape register supplement (Supplementary Table 2 Phase 0 / Urgency Classification /
Post-Pipeline Validation gates, Supplementary Data 1 drug safety maps and severity algorithm,
Supplementary Note 3 PT-TEST-010 trace). Modules:

* :mod:`~processors.clinical.fhir_input`: the edge (sanitise, validate with fhir.resources R4B, normalise);
* :mod:`~processors.clinical.state`: the patient-state reducer;
* :mod:`~processors.clinical.phase0`, :mod:`~processors.clinical.nti`,
  :mod:`~processors.clinical.traffic_light`, :mod:`~processors.clinical.safety_patterns`: the gates;
* :mod:`~processors.clinical.assess`: assessment assembly and the stream processor;
* :mod:`~processors.clinical.knowledge`: the YAML knowledge base loader (the only file I/O).

Importing this package is cheap: fhir.resources, pint and the drug vocabulary load lazily.
"""
