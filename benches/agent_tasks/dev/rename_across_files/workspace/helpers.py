def fmt_name(first, last):
    return first.strip().title() + " " + last.strip().title()
