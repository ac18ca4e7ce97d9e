"""Benchmarks, one module per area, each a typer command function exposed as ``clingate bench <area>``."""
