from helpers import fmt_name


def welcome(first, last):
    return "Welcome, " + fmt_name(first, last) + "!"


if __name__ == "__main__":
    print(welcome("ada", "lovelace"))
