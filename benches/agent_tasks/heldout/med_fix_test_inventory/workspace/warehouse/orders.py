from .inventory import Inventory, OutOfStock


def fulfil(inventory, order):
    """Takes every line of `order` (sku -> qty) out of `inventory`; returns the skus that could not be filled."""
    missing = []
    for sku, qty in order.items():
        try:
            inventory.remove(sku, qty)
        except OutOfStock:
            missing.append(sku)
    return missing
