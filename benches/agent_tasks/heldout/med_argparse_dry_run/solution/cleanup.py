"""Delete the temporary files a build leaves in a folder tree."""

import argparse
import os

PATTERNS = (".tmp", ".bak", "~")


def find_junk(root):
    """Paths under `root` whose name ends in one of PATTERNS, sorted."""
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(PATTERNS):
                found.append(os.path.join(folder, name))
    return sorted(found)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", nargs="?", default=".", help="the folder to clean (default: here)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    parser.add_argument("-n", "--dry-run", action="store_true", help="only list what would be removed")
    args = parser.parse_args(argv)
    junk = find_junk(args.root)
    for path in junk:
        if not args.dry_run:
            os.remove(path)
        if not args.quiet:
            print("would remove" if args.dry_run else "removed", path)
    if not args.quiet:
        print("%d files %s" % (len(junk), "would be removed" if args.dry_run else "removed"))


if __name__ == "__main__":
    main()
