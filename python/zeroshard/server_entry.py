"""`zeroshard-server` as pip installs it: the server binary the package
carries (zeroshard/bin/), run with the same arguments."""

import os
import sys

from .local_cluster import bin_dir


def main():
    server = os.path.join(bin_dir(), "zeroshard-server")
    os.execv(server, [server] + sys.argv[1:])


if __name__ == "__main__":
    main()
