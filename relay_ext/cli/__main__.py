"""``python -m relay_ext.cli``: the same as the ``quantfuse`` console script."""

from . import main

raise SystemExit(main())
