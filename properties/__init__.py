"""Hypothesis strategies, checks and properties of token-exact equivalence."""

import warnings

# torch warns on import when NumPy is absent; this project never uses NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
