#!/usr/bin/env bash
# Copies every .txt note in notes/ (subfolders included) into backup/<date>/, keeping the folder layout,
# and writes the list of copied files to backup/<date>/MANIFEST.
set -euo pipefail

src="notes"
day="${BACKUP_DATE:-$(date +%Y-%m-%d)}"
dest="backup/$day"

mkdir -p "$dest"
: > "$dest/MANIFEST"
find "$src" -type f -name '*.txt' | sort | while read -r f; do
  rel="${f#"$src"/}"
  mkdir -p "$dest/$(dirname "$rel")"
  cp "$f" "$dest/$rel"
  echo "$rel" >> "$dest/MANIFEST"
done
echo "backed up $(wc -l < "$dest/MANIFEST") notes to $dest"
