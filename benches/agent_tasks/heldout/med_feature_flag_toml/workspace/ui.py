import settings


def theme():
    return "light"


def header():
    return "%s (%s)" % (settings.APP_NAME, ", ".join(settings.enabled_features()))
