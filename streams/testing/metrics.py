"""Reading a clingate process's Prometheus endpoint from outside, as a scraper does."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scraped(port: int, timeout_s: float = 10.0) -> dict[str, float]:
    """Every sample of the ``/metrics`` endpoint at ``port`` on this machine, summed over its labels, by
    sample name (e.g. ``clingate_dbpm_verdicts_total``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def scraped_sum(port: int, sample: str) -> float:
    """The sum over its labels of the samples named ``sample`` at ``port`` (:func:`scraped`); 0 when
    there are none."""
    return scraped(port).get(sample, 0.0)
