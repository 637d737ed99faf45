"""`python -m lakesink.options [docs/options.md]`: regenerate the page's option tables."""

import sys
from pathlib import Path

from .page import write_page

write_page(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/options.md"))
