"""Reading a clingate process's Prometheus endpoint from outside, as a scraper does."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def _samples(port: int, timeout_s: float) -> Iterator[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        yield from family.samples


def scraped(port: int, timeout_s: float = 10.0) -> dict[str, float]:
    """Every sample of the ``/metrics`` endpoint at ``port`` on this machine, summed over its labels, by
    sample name (e.g. ``clingate_dbpm_verdicts_total``)."""
    sums: dict[str, float] = {}
    for sample in _samples(port, timeout_s):
        sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def scraped_by(port: int, sample: str, label: str, timeout_s: float = 10.0) -> dict[str, float]:
    """The samples named ``sample`` at ``port`` summed by the value of their ``label`` (e.g. the records
    a worker's loops consumed, by topic)."""
    sums: dict[str, float] = {}
    for found in _samples(port, timeout_s):
        if found.name == sample:
            key = found.labels.get(label, "")
            sums[key] = sums.get(key, 0.0) + found.value
    return sums


def scraped_sum(port: int, sample: str) -> float:
    """The sum over its labels of the samples named ``sample`` at ``port`` (:func:`scraped`); 0 when
    there are none."""
    return scraped(port).get(sample, 0.0)
