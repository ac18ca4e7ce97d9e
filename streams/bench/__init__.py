"""Benchmarks, one module per area, exposed as ``clingate bench <area>``."""
