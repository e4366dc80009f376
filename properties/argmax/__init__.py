"""The argmax and top-k properties, the rule a wrong token broke, and the faults' models."""
