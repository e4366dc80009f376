"""The project's own local path: per-rank argmax and top-k, packed keys, the vocab-parallel layout.

``group`` is the TP-group interface it is written against; the groups themselves live in ``groups``.  It imports
only ``reference``, never ``groups``, ``engines``, ``properties`` or ``tpargmax``: ``impls`` names the engines'
built-ins by ``MODULE:ATTR`` and imports them only when asked for.
"""

import warnings

NUMPY_NOTICE = "Failed to initialize NumPy"


def quiet_numpy_notice() -> None:
    """Hide torch's import-time UserWarning that NumPy is absent: this project never needs NumPy.

    Only command-line entry points call this, before they import torch; a library
    import changes no warning filter.
    """
    warnings.filterwarnings("ignore", message=NUMPY_NOTICE, category=UserWarning)
