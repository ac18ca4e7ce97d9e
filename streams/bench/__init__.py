"""Benchmarks, one module per area, each exposed as ``clingate bench <area>``."""
