import sys

from tanplan.cli import main

sys.exit(main())
