"""``python -m kinesis_actors.cli``: the same as the ``kinesis-actors`` command."""

import sys

from ._main import main

sys.exit(main())
