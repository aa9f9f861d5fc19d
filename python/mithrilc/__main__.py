"""``python -m mithrilc`` and the ``mithrilc`` command of the wheel: the command line
itself, run in this process."""

import sys

from . import _mithrilc


def main() -> None:
    sys.exit(_mithrilc.main(["mithrilc", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
