"""Hypothesis strategies, checks and properties of token-exact equivalence.

It never imports ``tpargmax`` (the command sits above it); it names implementations through ``sharded.impls``.
"""
