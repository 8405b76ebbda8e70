import sys

from hack.benchmark.cli import main

sys.exit(main())
