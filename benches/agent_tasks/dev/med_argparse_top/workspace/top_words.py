"""Print the most common words of a text file, most common first."""

import argparse
from collections import Counter


def count_words(text):
    words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
    return Counter(w for w in words if w)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", help="the text file")
    parser.add_argument("--min-length", type=int, default=1, help="ignore shorter words")
    args = parser.parse_args(argv)
    with open(args.path) as f:
        counts = count_words(f.read())
    ranked = [(w, n) for w, n in counts.most_common() if len(w) >= args.min_length]
    for word, n in ranked:
        print("%s %d" % (word, n))


if __name__ == "__main__":
    main()
