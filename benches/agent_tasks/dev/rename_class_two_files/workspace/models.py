class Usr:
    def __init__(self, name):
        self.name = name

    def label(self):
        return "user:" + self.name
