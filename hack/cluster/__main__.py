import sys

from hack.cluster.cli import main

sys.exit(main())
