"""vLLM under test, in wings from the bottom: ``wheel`` loads the installed build (finds its model classes, builds
them on the CPU), ``subjects`` runs its head, model classes and samplers under the contract, ``corrections`` holds the
project's corrections, ``causes`` what its pages say, ``releases`` each release as data, ``e2e`` its whole engine.
"""
