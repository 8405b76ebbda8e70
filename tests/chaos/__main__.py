from tests.chaos.cli import main

raise SystemExit(main())
