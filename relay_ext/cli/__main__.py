"""``python -m relay_ext.cli``: the same as the ``quantfuse`` console script."""

from relay_ext.cli import main

raise SystemExit(main())
