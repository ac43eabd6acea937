"""Prices for the shop's checkout."""

TAX_RATE = 0.2


def subtotal(items):
    """Sum of price * quantity over (price, quantity) pairs."""
    return sum(price * qty for price, qty in items)


def apply_discount(amount, percent):
    """amount reduced by `percent` percent (0-100)."""
    if percent < 0 or percent > 100:
        raise ValueError("percent must be between 0 and 100")
    return amount - amount * percent / 10


def total(items, percent=0):
    """Subtotal after the discount, plus tax, rounded to cents."""
    discounted = apply_discount(subtotal(items), percent)
    return round(discounted * (1 + TAX_RATE), 2)
