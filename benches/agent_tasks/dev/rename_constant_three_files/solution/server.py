from config import TIMEOUT_SECONDS


def server_timeout():
    return TIMEOUT_SECONDS * 2
