"""Other people's code under test: engines' shipped layers, kernels, samplers and model classes, from their wheels.

A package per engine: ``vllm`` (its vocab-parallel head, its model classes by family, its samplers), ``sglang`` (its
Triton kernels and candidate sampler) and ``tpu_inference`` (its JAX sampler), each with what its failures come from.
At the top, what the engines share: ``versions``, ``findings`` (the kinds), ``variants`` (other engines' local
argmax, written from the spec's facts), ``safetensors_file`` and ``sampling_page`` (the samplers' page, across
engines).  It may import ``sharded`` and ``reference``, and never ``properties`` or ``tpargmax``: the properties test
engines, not the other way round.
"""
