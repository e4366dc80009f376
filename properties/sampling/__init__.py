"""The sampler properties: token-exact, kept set, invariance, log-probabilities, support and distribution."""
