"""Real-data sources for the clinical tests, fetched / generated into the user cache (never committed).

* HL7 FHIR R4 examples: the npm package ``hl7.fhir.r4.examples`` 4.0.1 (CC0), downloaded once from the
  npm registry tarball and checked against the registry's published SHA-1; read straight from the
  tarball, nothing extracted.
* Synthea patients: generated offline by ``tietai-synthea`` (a test dependency) with a fixed seed and
  reference date, once per cache.

Cache root: ``<settings.home>/test-data`` (``$CLINGATE_HOME``, default ``~/.cache/clingate``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.runtime.settings import get_settings

HL7_VERSION = "4.0.1"
HL7_URL = f"https://registry.npmjs.org/hl7.fhir.r4.examples/-/hl7.fhir.r4.examples-{HL7_VERSION}.tgz"
HL7_SHA1 = "537ea7db3f3c7b3575fe2eaa7808bad21261cca3"  # dist.shasum published by the npm registry
SYNTHEA_ARGS = ("-p", "3", "-s", "2026", "-a", "70-90", "-r", "20260329")


def cache_dir() -> Path:
    path = get_settings().home / "test-data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def hl7_examples_tarball() -> Path:
    """The cached examples tarball, downloaded and verified on first use."""
    target = cache_dir() / f"hl7.fhir.r4.examples-{HL7_VERSION}.tgz"
    if not target.exists():
        partial = target.with_suffix(".part")
        with urllib.request.urlopen(HL7_URL, timeout=120) as response, partial.open("wb") as fh:
            fh.write(response.read())
        if hashlib.sha1(partial.read_bytes()).hexdigest() != HL7_SHA1:
            partial.unlink()
            raise RuntimeError(f"{HL7_URL} does not match the registry's SHA-1; refusing to cache it")
        partial.rename(target)
    return target


def hl7_examples(resource_types: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file name, parsed JSON)`` of the examples whose file name starts with one of ``resource_types``."""
    prefixes = tuple(f"package/{t}-" for t in resource_types)
    with tarfile.open(hl7_examples_tarball(), "r:gz") as tar:
        members = sorted(
            (
                m
                for m in tar.getmembers()
                if m.isfile() and m.name.startswith(prefixes) and m.name.endswith(".json")
            ),
            key=lambda m: m.name,
        )
        for member in members:
            fh = tar.extractfile(member)
            if fh is None:
                continue
            data = json.loads(fh.read().decode("utf-8"))
            if isinstance(data, dict) and "resourceType" in data:
                yield member.name.rsplit("/", 1)[-1], data


def synthea_available() -> bool:
    return importlib.util.find_spec("synthea") is not None


def synthea_bundles() -> list[Path]:
    """Generated Synthea patient bundles (generated once per cache; fixed seed and reference date)."""
    out = cache_dir() / ("synthea-" + "-".join(SYNTHEA_ARGS).replace("--", "-"))
    fhir = out / "fhir"
    if not fhir.exists() or not any(fhir.glob("*.json")):
        code = "import sys; from synthea.cli import cli; sys.exit(cli())"
        subprocess.run(
            [sys.executable, "-c", code, "generate", *SYNTHEA_ARGS, "-o", str(out)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return sorted(fhir.glob("*.json"))
