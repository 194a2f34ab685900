"""`python -m harness.worker` (under torchrun): see harness.worker.parts."""

import sys

from harness.worker.parts import main

sys.exit(main())
