"""Benchmarks: reproducible, results written to benchmarks/results/."""
