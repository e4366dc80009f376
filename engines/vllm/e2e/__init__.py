"""vLLM's whole engine under test: speculative decoding with ``use_local_argmax_reduction`` on and off, on the CPU.

``scenario`` is what one example draws (a model plan, prompts, a length); ``checkpoints`` writes the tiny Hugging
Face models it describes; ``engine`` starts and drives one engine per (method, tp, switch, dtype) in a host process
of its own (``host``), whose workers carry the probe (``worker``); ``plants`` puts a broken local path into every
worker, for the project's own tests.  Nothing here imports vLLM but ``host`` and ``worker``, which run in the engine.
"""
