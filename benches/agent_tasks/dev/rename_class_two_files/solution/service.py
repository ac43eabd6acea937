from models import User


def make(name):
    return User(name)
