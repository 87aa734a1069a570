"""What ansible-test runs as its ``get-pip.py`` to put pip into a new, empty virtual environment.

ansible-test 2.19 downloads that script from ci-files.testing.ansible.com, a host outside the package
registries, unless ``~/.ansible/test/cache/get_pip_<version>.py`` is there; tests/sanity.sh copies this file
there. It runs the same way (``python get_pip_<v>.py [pip options] pip==<version> --no-setuptools --no-wheel``):
the pip bundled with Python (ensurepip), then that pip installs the packages asked for from the package index.
"""
import ensurepip
import os
import subprocess
import sys

# get-pip.py's own flags: what it leaves out, which pip install leaves out anyway
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main():
    env = dict(os.environ)  # ensurepip drops PIP_* and sets PIP_CONFIG_FILE=/dev/null in this process
    ensurepip.bootstrap(upgrade=True)
    args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env)


if __name__ == "__main__":
    sys.exit(main())
