"""shop-core: prices, carts and orders."""

__version__ = "1.4.2"

from .cart import Cart  # noqa: E402,F401
