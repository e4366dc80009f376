"""Adapters of other people's code under test: engines' shipped kernels and glue, loaded from their wheels."""
