"""The DBPM engine of a worker, built from its settings: one configuration for every role.

The memory's writers learn and maintain with :func:`dbpm_engine`, the gates decide with the same
engine, and ``clingate replay`` and the demo's reference run :func:`in_process_engine` over one whole
memory; every one of them takes its configuration from :func:`dbpm_config`, so two processes with
the same ``CLINGATE_DBPM_*`` settings run one rule set (each decision names its fingerprint, each
memory partition its last writer's).
"""

from __future__ import annotations

from dataclasses import replace

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from streams.runtime.settings import Settings

_DAY_S = 86400.0


def dbpm_config(settings: Settings) -> DBPMConfig:
    """The engine configuration the ``CLINGATE_DBPM_*`` settings describe: the paper's deployed values
    (:class:`~processors.dbpm.DBPMConfig` defaults) with the flags, the QA signal source and fail-rate
    threshold, the maintenance grid and the retentions set.
    NER coverage off is an empty Eq. 9 bucket table: the QA gate then has no bucket to look up for any
    category and decides each by its fallback, which is what M1V7_ENABLE=0 leaves."""
    config = DBPMConfig(
        qa_fail_rate_threshold=settings.dbpm_qa_fail_threshold,
        qa_signal=settings.dbpm_qa_signal,
        maintenance_interval_s=settings.dbpm_maintenance_interval_s,
        whitelist_retention_s=settings.dbpm_whitelist_retention_days * _DAY_S,
        preempt_retention_s=settings.dbpm_preempt_retention_days * _DAY_S,
        patient_retention_s=settings.dbpm_patient_retention_days * _DAY_S,
    )
    if not settings.dbpm_ner_coverage:
        config = replace(config, qa_ner_buckets={})
    return config.with_flags(
        cross_task=settings.dbpm_cross_task,
        maintenance=settings.dbpm_maintenance,
        three_tier=settings.dbpm_three_tier,
        uncertainty=settings.dbpm_uncertainty,
        source_weights=settings.dbpm_source_weights,
        qa_hard_block=settings.dbpm_qa_hard_block,
        downgrade_first=settings.dbpm_downgrade_first,
        disabled=settings.dbpm_disable,
        ontology_filter=settings.dbpm_ontology_filter != "off",
        ontology_tag_only=settings.dbpm_ontology_filter == "tag-only",
    )


def dbpm_engine(settings: Settings) -> DBPMEngine:
    """The engine of every role of a worker configured by ``settings``: the memory's writers learn and
    maintain with it, the gates decide with it (:meth:`~processors.dbpm.DBPMEngine.decide`, which reads
    only). Its caps are shared out over the memory's partitions (``cap_partitions``), so the whole
    memory keeps the paper's caps. The one place a worker's engine is built."""
    config = replace(dbpm_config(settings), cap_partitions=settings.topic_partitions)
    return DBPMEngine(config, load_ontology())


def in_process_engine(settings: Settings) -> DBPMEngine:
    """The engine configured by ``settings`` over one whole memory (``clingate replay``, the demo's
    reference): a worker's (:func:`dbpm_engine`) but for the caps, which are whole, not shared out."""
    return DBPMEngine(dbpm_config(settings), load_ontology())
