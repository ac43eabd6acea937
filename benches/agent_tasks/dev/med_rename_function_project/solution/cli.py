"""Command line: print the settings a file gives."""

import sys

import settings


def show(path):
    with open(path) as f:
        values = settings.load_config(f.read())
    for key in sorted(values):
        print("%s = %s" % (key, values[key]))


if __name__ == "__main__":
    show(sys.argv[1])
