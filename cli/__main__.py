from mtpedge.main import main

raise SystemExit(main())
