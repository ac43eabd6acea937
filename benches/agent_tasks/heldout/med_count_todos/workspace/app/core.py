def run():
    # TODO: handle errors
    return 1


def stop():
    pass  # TODO stop the workers first
