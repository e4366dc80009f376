import sys

from tpargmax.cli import main

sys.exit(main())
