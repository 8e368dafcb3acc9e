"""``python -m archzoo ...``"""

import sys

from archzoo.cli import main

sys.exit(main())
