"""`python -m lakesink.cli`: the `lakesink` command."""

from . import main

raise SystemExit(main())
