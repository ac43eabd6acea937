def greet(name):
    return "Hello " + name + "!"


def bye(name):
    return "Goodbye, " + name + "."
