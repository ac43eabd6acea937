def index():
    return 'TODO list page'  # TODO: template
