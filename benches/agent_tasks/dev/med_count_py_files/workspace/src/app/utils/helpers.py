def slug(s):
    return s.lower()
