class User:
    def __init__(self, name):
        self.name = name

    def label(self):
        return "user:" + self.name
