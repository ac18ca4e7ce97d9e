"""Reading a clingate process's Prometheus endpoint from outside, as a scraper does."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scraped_sum(port: int, sample: str) -> float:
    """The sum over its labels of the samples named ``sample`` (e.g. ``clingate_dbpm_verdicts_total``) on
    the ``/metrics`` endpoint at ``port`` on this machine; 0 when there are none."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == sample
    )
