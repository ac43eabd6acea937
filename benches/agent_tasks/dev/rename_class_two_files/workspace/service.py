from models import Usr


def make(name):
    return Usr(name)
