def test_order():
    pass
