"""The processors stay cheap to import: heavy libraries load only where they are used."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_gates_does_not_load_fhir_pint_or_the_vocabulary():
    code = (
        "import sys, processors.clinical.assess, processors.clinical.fhir_input;"
        "heavy = ('fhir.resources', 'pint', 'drug_named_entity_recognition');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"
