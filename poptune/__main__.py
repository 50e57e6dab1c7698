import sys

from poptune.cli import main

sys.exit(main())
