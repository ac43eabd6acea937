import util


def run():
    return 0
