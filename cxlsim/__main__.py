"""`python -m cxlsim` is the `cxlsim` command."""
import sys

from cxlsim.cli import main

sys.exit(main())
