import settings


def theme():
    return "dark" if settings.DARK_MODE else "light"


def header():
    return "%s (%s)" % (settings.APP_NAME, ", ".join(settings.enabled_features()))
