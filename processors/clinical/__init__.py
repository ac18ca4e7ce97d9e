"""Deterministic clinical gates on FHIR R4: pure processors.

Source: PharmMesh escape register supplement (Supplementary Table 2 Phase 0 / Urgency Classification /
Post-Pipeline Validation gates, Supplementary Data 1 drug safety maps and severity algorithm,
Supplementary Note 3 PT-TEST-010 trace). Facts, numbers and keyword lists are used with attribution;
they live as data in ``data/``.

Modules:

* :mod:`~processors.clinical.fhir_input`: the edge (sanitise, validate with fhir.resources R4B, normalise);
* :mod:`~processors.clinical.state`: the patient-state reducer ``(state, update, now)``;
* :mod:`~processors.clinical.phase0`, :mod:`~processors.clinical.nti`,
  :mod:`~processors.clinical.traffic_light`, :mod:`~processors.clinical.safety_patterns`: the gates;
* :mod:`~processors.clinical.assess`: ``assess(state, as_of, review)`` and the stream processor;
* :mod:`~processors.clinical.knowledge`: the YAML knowledge base loader (the only file I/O).

Importing this package is cheap: fhir.resources, pint and the drug vocabulary load lazily.

Where the seed is ambiguous or silent, the decision and where it is recorded:

* CRITICAL = supratherapeutic + symptom (algorithm and trace), not "+ interaction" (summary tables):
  :mod:`~processors.clinical.nti`.
* Each NTI drug against its own map, overall = maximum (pooled flags would make PT-TEST-008 CRITICAL):
  :mod:`~processors.clinical.nti`.
* "bioprosthetic valve" masked before valve matching: ``data/drug_maps/warfarin.yaml``.
* INR by LOINC first, display second, unit-checked (PT in seconds is never an INR):
  ``data/parameters.yaml``, :mod:`~processors.clinical.view`.
* Symptom stems over clinical text only, never medication strings: :mod:`~processors.clinical.view`.
* Staleness on exact elapsed time, ``age_days`` in UTC calendar days, overall = worst observed class,
  ``MISSING`` for absent dependencies, banner forms not published by the seed:
  :mod:`~processors.clinical.phase0`.
* Brand names through the drug-named-entity-recognition vocabulary plus a small supplement:
  :mod:`~processors.clinical.vocabulary`.
* Dependency map extension, conditional calcium / bridging labs: ``data/med_dependencies.yaml``,
  :func:`~processors.clinical.phase0.medication_dependencies`.
* Unknown subcategory -> UNCLASSIFIED_MANUAL_REVIEW -> RED, unknown disposition -> RED, Rule A in shadow
  mode, shadow light = without the adversarial reviewer, Rule C recorded even when already RED:
  :mod:`~processors.clinical.traffic_light`.
* Tier B class maps, ESC-032, ESC-033 (and its floor): :class:`~processors.clinical.knowledge.GateFlags`.
* Version order and deletes: :mod:`~processors.clinical.state`.
* R4 validation through the R4B models: :mod:`~processors.clinical.fhir_input`.
"""
