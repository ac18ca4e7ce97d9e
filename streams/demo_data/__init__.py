"""Bundled demo data, installed with the package: the inputs of ``clingate demo`` and of the tests.

* ``clinical/``: the golden FHIR R4 bundles PT-TEST-008, -009, -010 and -012 (synthetic, built from
  the case descriptions of the PharmMesh escape register supplement; see
  ``tests/unit/clinical/test_clinical_golden.py`` for the published outputs they reproduce).
* ``docs/``: document bundles and classification outputs of the classification-arbiter examples (the
  seed's slide 2 genomic report and clinical note, a Quest CBC, a requisition) with their trap cases.

There is one copy of these files; the tests read them from here.
"""

from __future__ import annotations

from pathlib import Path

CLINICAL = Path(__file__).parent / "clinical"
"""Directory of the golden FHIR bundles, one ``<case>.json`` per patient."""

DOCS = Path(__file__).parent / "docs"
"""Directory of the classification-arbiter examples (``bundle_*.json``, ``classification_*.json``)."""
