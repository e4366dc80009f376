"""SGLang 0.5.23 under test, from its wheel's own files (nothing of ``sglang`` imported, nothing copied): ``wheel``
loads its kernels and functions, ``subjects`` runs its greedy picks and samplers, ``corrections`` corrects the greedy
picks, ``causes`` says what its pages' failures come from.  Nothing is imported here, so naming one module loads
only what it needs.
"""
