def shout(s):
    return s.lower()


def whisper(s):
    return s.lower()
