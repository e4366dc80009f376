"""Other people's code under test: engines' shipped layers, kernels and model classes, loaded from their wheels.

``vllm`` (its vocab-parallel head and its model classes by family), ``sglang`` (its Triton kernels) and
``variants`` (other engines' local argmax, written from the spec's facts).  It may import ``sharded`` and
``reference``, and never ``properties`` or ``tpargmax``: the properties test engines, not the other way round.
"""
