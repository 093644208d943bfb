from realsim.cli import main

raise SystemExit(main())
