"""SGLang 0.5.23 under test, from its wheel's own files: nothing of ``sglang`` is imported, nothing is copied.

``kernels`` runs its GPU local argmax and classic path (``sglang_deferred_argmax``, ``sglang_classic``) from the two
Triton kernel files; ``sampling`` holds DFlash's candidate top-k and the seeded sampler as sampling subjects, over
``sampling_wheel`` (the stand-ins for SGLang's runtime) and ``wheel`` (a wheel file's functions, compiled without
SGLang's imports); ``findings_sampling`` says what its failures on the samplers' page come from.  Nothing is imported
here, so naming one module loads only what it needs.
"""
