import sys

from opbench.cli import main

sys.exit(main())
