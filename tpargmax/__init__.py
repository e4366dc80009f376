"""The ``tpargmax`` command. It runs from the checkout: the suite's packages sit beside this one.

It is the top floor: it may import every other package, and none of them imports it.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))
