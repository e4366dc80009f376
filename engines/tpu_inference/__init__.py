"""tpu-inference 0.32.0 under test (vLLM's TPU backend, JAX), its sampler on a mesh of simulated CPU devices:
``wheel`` runs the installed wheel's ``sample``, ``subjects`` makes its two paths subjects, ``corrections`` holds the
corrected masks, ``causes`` says what the page's failures come from.  Nothing is imported here: jax and NumPy load
only when a subject runs.
"""
