from twistgw.cli import main

raise SystemExit(main())
