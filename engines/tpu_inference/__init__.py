"""tpu-inference 0.32.0 under test (vLLM's TPU backend, JAX): its sampler on a mesh of simulated CPU devices.

``adapter`` runs the installed wheel's ``sample`` (the environment it needs, stubs for what it imports but never
calls); ``sampler`` makes its classic and sharded paths two subjects of the sampling contract, ``fixes`` the same
with the project's corrected masks, and ``findings`` says what the page's failures come from.  Nothing is imported
here: jax and NumPy load only when a subject runs.
"""
