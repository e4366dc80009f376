"""Hypothesis strategies, checks and properties of token-exact equivalence."""
