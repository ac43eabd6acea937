"""shop-web: the web front end."""

__version__ = "1.4.2"
