import sys

from memledger.cli import main

sys.exit(main())
