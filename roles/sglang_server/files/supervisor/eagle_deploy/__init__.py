# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""eagle-deploy's module_utils that the sglang_supervisor program imports, installed by the role sglang_server: each file
here is one of module_utils/ (a link in the role's files/), importing the others relatively
(module_utils/sglang_program.py)."""
