from config import TIMEOUT_SECONDS


def client_timeout():
    return TIMEOUT_SECONDS
