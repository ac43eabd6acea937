# TODO: connection pool
# TODO: retries
URL = 'sqlite://'


def connect():
    return URL  # todo? no, lower case does not count
