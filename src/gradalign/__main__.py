from gradalign.cli import main

raise SystemExit(main())
