# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python -m sglang_emulator ARGS``: the same as the ``sglang-emulator`` console script."""

import sys

from sglang_emulator.cli import main

if __name__ == "__main__":
    sys.exit(main())
