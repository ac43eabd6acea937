python3 -m app.main
