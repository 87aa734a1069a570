# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launcher of eagle-deploy's sglang_hub_fetch program, installed by the role sglang_model (tasks/program.yml),
run as ``python -I -B <this directory> ARGS``: Python puts this directory alone first on sys.path
(module_utils/sglang_program.py)."""

import sys

from eagle_deploy.sglang_hub_fetch import main

sys.exit(main())
