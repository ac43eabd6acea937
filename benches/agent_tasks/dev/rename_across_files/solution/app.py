from helpers import format_name


def welcome(first, last):
    return "Welcome, " + format_name(first, last) + "!"


if __name__ == "__main__":
    print(welcome("ada", "lovelace"))
