def register_shardings():
    pass
