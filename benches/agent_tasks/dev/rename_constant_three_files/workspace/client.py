from config import TIMEOUT


def client_timeout():
    return TIMEOUT
