"""Lets ansible-lint's `args` rule import our modules: it imports each module in-process to read its
argument spec, and our modules import `ansible.module_utils.sglang_*`, which Ansible itself ships to the
target inside the module (AnsiballZ) but which is not on the controller's `ansible.module_utils` path.
tests/run.sh puts this directory on PYTHONPATH for ansible-lint only."""
import os

try:
    import ansible.module_utils as _mu

    _here = os.path.dirname(os.path.abspath(__file__))
    _mu.__path__.append(os.path.join(_here, "..", "..", "module_utils"))
except ImportError:  # not the controller venv
    pass
