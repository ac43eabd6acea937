from config import TIMEOUT


def server_timeout():
    return TIMEOUT * 2
