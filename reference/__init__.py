"""The oracle: the classic full-vocabulary path, the contract's reading of every input.

It is the floor: it never imports ``sharded``, ``engines``, ``properties`` or ``tpargmax`` (tests/test_layering.py).
"""
