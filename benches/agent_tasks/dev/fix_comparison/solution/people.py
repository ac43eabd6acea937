ADULT_AGE = 18


def is_adult(age):
    """True when age is ADULT_AGE or more."""
    return age >= ADULT_AGE


def describe(age):
    if is_adult(age):
        return "adult"
    return "minor"
