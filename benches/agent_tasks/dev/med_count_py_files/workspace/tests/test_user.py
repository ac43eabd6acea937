def test_user():
    pass
