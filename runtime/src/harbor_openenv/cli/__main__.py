"""``python -m harbor_openenv.cli``: the ``harbor-openenv`` command."""

import sys

from harbor_openenv.cli.main import main

sys.exit(main())
