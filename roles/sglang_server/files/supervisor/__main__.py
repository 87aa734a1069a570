# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launcher of eagle-deploy's sglang_supervisor program, installed by the role sglang_server (tasks/program.yml),
run as ``python -I -B <this directory> ARGS``: Python puts this directory alone first on sys.path
(module_utils/sglang_program.py)."""

import sys

from eagle_deploy.sglang_supervisor import main

sys.exit(main())
