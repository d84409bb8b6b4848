from jaxknock.cli import main

raise SystemExit(main())
