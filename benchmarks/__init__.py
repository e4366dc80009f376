"""Benchmarks of the local paths against the classic gather: what each moves per step, and how long it takes."""
