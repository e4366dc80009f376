"""The local path: per-rank argmax reduced over a TP group (simulated or torch.distributed)."""

import warnings

NUMPY_NOTICE = "Failed to initialize NumPy"


def quiet_numpy_notice() -> None:
    """Hide torch's import-time UserWarning that NumPy is absent: this project never needs NumPy.

    Only command-line entry points call this, before they import torch; a library
    import changes no warning filter.
    """
    warnings.filterwarnings("ignore", message=NUMPY_NOTICE, category=UserWarning)
