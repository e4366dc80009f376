"""The ``tpargmax`` command. It runs from the checkout: the suite's packages sit beside this one.

It is the top floor: it may import every other package, and none of them imports it.
"""

import sys
from pathlib import Path

_CHECKOUT = str(Path(__file__).resolve().parent.parent)
if _CHECKOUT not in sys.path:
    sys.path.append(_CHECKOUT)
